"""fsdp on 2 GPUs (bf16, fp16) whose checkpoint loads into a plain single-GPU model, and the embedding-bag
model with its 2,000,000 x 150 table kept on the CPU by parallel.placement while the head trains on a GPU.

Skipped without CUDA; run on the device machine:
    .venv/bin/python -m pytest -q tests/gpu/test_fsdp_gpu.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from jobspec.events import CHECKPOINT_DIR
from tests.integration.trainer_helpers import TrainerRun, train
from trainers.checkpoint import checkpoint_name
from trainers.models import build_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")

STEPS = 60


def resnet_fsdp(precision: str) -> dict[str, Any]:
    return {
        "name": f"resnet18-fsdp-{precision}",
        "model": {"arch": "resnet18"},
        "data": {"dataset": "synthetic", "num_samples": 8192, "image_size": 32},
        "train": {"max_steps": STEPS, "batch_size": 128, "lr": 0.05, "seed": 0, "clip_grad_norm": 5.0},
        "parallel": {"strategy": "fsdp", "num_gpus": 2},
        "precision": precision,
        "checkpoint": {"every_n_epochs": 0, "every_n_steps": 0, "save_final": True},
        "metrics": {"every_n_steps": 10},
    }


def final_state(run: TrainerRun) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(
        run.run_dir / CHECKPOINT_DIR / checkpoint_name(STEPS), map_location="cpu", weights_only=True
    )
    return state


@two_gpus
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_fsdp_trains_and_its_checkpoint_loads_into_one_gpu_model(precision: str, tmp_path: Path) -> None:
    run = train(tmp_path, resnet_fsdp(precision), nproc=2, cuda_devices="0,1")
    loss = run.metric("loss")
    assert loss[-1][1] < 0.5 * loss[0][1], loss
    model = build_model("resnet18", {}, 3, 10, 32)
    model.load_state_dict(final_state(run)["model"])  # strict: bare keys, full shapes
    with torch.no_grad():
        assert model.cuda()(torch.randn(4, 3, 32, 32, device="cuda")).shape == (4, 10)


def test_embedding_table_on_the_cpu_head_on_the_gpu(tmp_path: Path) -> None:
    vocab, dim = 2_000_000, 150
    spec = {
        "name": "bags-hybrid",
        "model": {"arch": "embedding_bag", "kwargs": {"embedding_dim": dim}},
        "data": {"dataset": "synthetic_bags", "vocab_size": vocab, "num_samples": 16384, "num_classes": 8},
        "train": {"max_steps": STEPS, "batch_size": 256, "lr": 0.5, "seed": 0},
        "parallel": {"gpus": [0], "placement": {"embedding": "cpu"}},
        "checkpoint": {"every_n_epochs": 0, "every_n_steps": 0, "save_final": True},
        "metrics": {"every_n_steps": 10},
    }
    run = train(tmp_path, spec, nproc=1, cuda_devices="0")
    loss = run.metric("loss")
    assert loss[-1][1] < loss[0][1], loss
    assert run.metric("eval_accuracy")[-1][1] > 1 / 8 + 0.1
    table_mb = vocab * dim * 4 / 2**20
    # The GPU never held the table (1144 MB), only the head and a batch's pooled vectors.
    assert max(value for _, value in run.metric("peak_mem_mb")) < table_mb / 4
    assert final_state(run)["model"]["embedding.weight"].shape == (vocab, dim)

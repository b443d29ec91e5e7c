"""User code on real GPUs: what the CPU tests cannot reach (pinned loader memory and asynchronous copies,
bf16, channels_last, compile, SyncBatchNorm, NCCL under ddp and fsdp, pipeline stages on two GPUs).

Skipped without CUDA (the 2-GPU ones with fewer); run on the device machine:
    python3 -m pytest -q tests/gpu/test_user_code_gpu.py
Each job trains 40 steps; the loss must fall by a third. Curves are compared with a tolerance, not digit for
digit: cuDNN picks its kernels per run (the CPU tests pin the exact match).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from jobspec.events import SPEC_FILE
from tests.integration.trainer_helpers import TrainerRun, spec_with, train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")

ROOT = Path(__file__).resolve().parents[2]
BYOM = ROOT / "examples" / "byom"
TRANSFORMER = ROOT / "tests" / "integration" / "bundles" / "tiny_transformer"
CODE = "sha256:" + "0" * 64
STEPS = 40

EXAMPLE: dict[str, Any] = spec_with(
    {**json.loads((BYOM / SPEC_FILE).read_text()), "code": CODE, "precision": "bf16"},
    train={"max_steps": STEPS},
    parallel={"strategy": "single", "nproc_per_node": None, "gpus": [0]},
    performance={"channels_last": True},
    checkpoint={"every_n_steps": 20},
)
# A factory that hands back a torchvision model, trained on the built-in synthetic data resident on the GPU.
RESNET = """from torchvision.models import resnet18


def build(classes=10):
    return resnet18(num_classes=classes)
"""
RESNET_SPEC: dict[str, Any] = {
    "code": CODE,
    "model": {"factory": "models:build"},
    "data": {"dataset": "synthetic", "num_samples": 8192, "image_size": 64},
    "train": {"max_steps": STEPS, "batch_size": 128, "lr": 0.1},
    "parallel": {"gpus": [0]},
    "precision": "bf16",
    "performance": {"channels_last": True, "compile": True},
    "checkpoint": {"every_n_epochs": 0, "save_final": False},
    "metrics": {"every_n_steps": 10},
}


def assert_falls(run: TrainerRun) -> None:
    loss = run.metric("loss")
    assert loss and loss[-1][1] < 0.67 * loss[0][1], loss


def resnet_bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "models.py").write_text(RESNET)
    return bundle


def test_the_example_trains_through_pinned_loader_workers_and_resumes(tmp_path: Path) -> None:
    run = train(tmp_path / "run", EXAMPLE, nproc=1, cuda_devices="0", code_dir=BYOM)
    assert_falls(run)
    assert run.metric("eval_accuracy")[0][1] > 0.3
    checkpoint = run.run_dir / "checkpoints/step-00000020.pt"
    resumed = train(
        tmp_path / "resumed", EXAMPLE, nproc=1, resume_path=checkpoint, cuda_devices="0", code_dir=BYOM
    )
    expected = dict(run.metric("loss"))
    for step, value in resumed.metric("loss"):
        assert value == pytest.approx(expected[step], rel=0.02), step


def test_a_factorys_torchvision_model_trains_compiled_on_resident_data(tmp_path: Path) -> None:
    assert_falls(
        train(tmp_path / "run", RESNET_SPEC, nproc=1, cuda_devices="0", code_dir=resnet_bundle(tmp_path))
    )


@two_gpus
def test_a_factorys_batchnorm_syncs_under_ddp(tmp_path: Path) -> None:
    spec = spec_with(RESNET_SPEC, parallel={"strategy": "ddp", "gpus": [0, 1], "sync_batchnorm": True})
    assert_falls(train(tmp_path / "run", spec, nproc=2, cuda_devices="0,1", code_dir=resnet_bundle(tmp_path)))


@two_gpus
def test_the_transformer_trains_sharded_with_checkpointed_blocks(tmp_path: Path) -> None:
    spec = {
        "code": CODE,
        "model": {"factory": "models:build", "kwargs": {"vocab": 16, "width": 64, "depth": 4}},
        "data": {"factory": "data:build", "kwargs": {"count": 4096}},
        "train": {
            "loss": "models:loss",
            "max_steps": STEPS,
            "batch_size": 64,
            "optimizer": "adamw",
            "lr": 0.003,
        },
        "parallel": {"strategy": "fsdp", "gpus": [0, 1]},
        "precision": "bf16",
        "performance": {"activation_checkpointing": True},
        "checkpoint": {"every_n_epochs": 0},
        "metrics": {"every_n_steps": 10},
    }
    run = train(tmp_path / "run", spec, nproc=2, cuda_devices="0,1", code_dir=TRANSFORMER)
    assert_falls(run)
    assert run.metric("eval_token_accuracy")[0][1] > 0.4


@two_gpus
def test_the_example_splits_into_pipeline_stages_on_two_gpus(tmp_path: Path) -> None:
    spec = spec_with(
        EXAMPLE,
        parallel={"strategy": "pipeline", "gpus": [0, 1], "split_at": ["head"]},
        train={"loss": "cross_entropy"},
    )
    assert_falls(train(tmp_path / "run", spec, nproc=2, cuda_devices="0,1", code_dir=BYOM))

"""model.arch gpt on one GPU: bf16, compiled, with activation checkpointing per block; it trains and reports
tokens/s and, on a GPU of the peak table (trainers/lm.py), mfu. Over two GPUs in stages (pipeline and
model_parallel, its head untied): the same.

Skipped without CUDA (the staged runs without two GPUs); run on the device machine:
    .venv/bin/python -m pytest -q tests/gpu/test_gpt_gpu.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.integration.trainer_helpers import TrainerRun, spec_with, train
from trainers.lm import peak_flops

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

GPT: dict[str, Any] = {
    "name": "gpt-gpu",
    "model": {"arch": "gpt", "kwargs": {"n_layer": 4, "n_head": 4, "n_embd": 256}},
    "data": {"dataset": "synthetic_tokens", "block_size": 256, "vocab_size": 512, "num_samples": 2048},
    "train": {"max_steps": 40, "batch_size": 32, "optimizer": "adamw", "lr": 0.002, "betas": [0.9, 0.95]},
    "parallel": {"strategy": "single", "num_gpus": 1},
    "precision": "bf16",
    "performance": {"compile": True},
    "checkpoint": {"every_n_steps": 0, "every_n_epochs": 0, "save_final": True},
    "metrics": {"every_n_steps": 10},
}


def assert_trains_and_reports_mfu(run: TrainerRun, label: str) -> None:
    loss = run.metric("loss")
    assert loss[-1][1] < 0.5 * loss[0][1], loss
    assert all(value > 0 for _, value in run.metric("tokens_per_s"))
    if peak_flops(torch.cuda.get_device_name(0)) is not None:
        mfu = run.metric("mfu")
        assert mfu and all(0 < value < 1 for _, value in mfu), mfu
        print(f"gpt 4x256 bf16 compiled, {label}: mfu {mfu[-1][1]:.3f}")


@pytest.mark.parametrize("checkpointing", [False, True])
def test_gpt_trains_compiled_in_bf16_and_reports_mfu(tmp_path: Path, checkpointing: bool) -> None:
    spec = spec_with(GPT, performance={"compile": True, "activation_checkpointing": checkpointing})
    run = train(tmp_path, spec, nproc=1, cuda_devices="0")
    assert_trains_and_reports_mfu(run, f"checkpointing={checkpointing}")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize(
    ("parallel", "nproc"),
    [({"strategy": "pipeline", "microbatches": 4}, 2), ({"strategy": "model_parallel"}, 1)],
)
def test_gpt_trains_over_two_gpus_in_stages(tmp_path: Path, parallel: dict[str, Any], nproc: int) -> None:
    """Blocks 0-1 with the embeddings on GPU 0, blocks 2-3 with ln_f and the untied head on GPU 1."""
    staged = spec_with(GPT, parallel={**parallel, "num_gpus": 2, "split_at": ["blocks.2"]})
    run = train(tmp_path, staged, nproc=nproc, cuda_devices="0,1")
    assert_trains_and_reports_mfu(run, parallel["strategy"])
    model = run.final_checkpoint()["model"]
    assert not torch.equal(model["lm_head.weight"], model["wte.weight"])

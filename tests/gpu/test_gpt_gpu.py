"""model.arch gpt on one GPU: bf16, compiled, with activation checkpointing per block; it trains and reports
tokens/s and, on a GPU of the peak table (trainers/lm.py), mfu.

Skipped without CUDA; run on the device machine:
    .venv/bin/python -m pytest -q tests/gpu/test_gpt_gpu.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.integration.trainer_helpers import spec_with, train
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


@pytest.mark.parametrize("checkpointing", [False, True])
def test_gpt_trains_compiled_in_bf16_and_reports_mfu(tmp_path: Path, checkpointing: bool) -> None:
    spec = spec_with(GPT, performance={"compile": True, "activation_checkpointing": checkpointing})
    run = train(tmp_path, spec, nproc=1, cuda_devices="0")
    loss = run.metric("loss")
    assert loss[-1][1] < 0.5 * loss[0][1], loss
    assert all(value > 0 for _, value in run.metric("tokens_per_s"))
    if peak_flops(torch.cuda.get_device_name(0)) is not None:
        mfu = run.metric("mfu")
        assert mfu and all(0 < value < 1 for _, value in mfu), mfu
        print(f"gpt 4x256 bf16 compiled, checkpointing={checkpointing}: mfu {mfu[-1][1]:.3f}")

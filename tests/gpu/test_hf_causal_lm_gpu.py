"""model.arch hf_causal_lm on a GPU: the tiny Llama of the CPU tests fine-tuned with LoRA under fsdp,
activation checkpointing per decoder layer and bf16; its loss falls and its export loads and predicts.

Skipped without CUDA; run on the device machine:
    .venv/bin/python -m pytest -q tests/gpu/test_hf_causal_lm_gpu.py
"""

from __future__ import annotations

import math
import tarfile
from pathlib import Path

import pytest
import torch

from jobspec.datadir import DATA_DIR_ENV
from tests.integration.trainer_helpers import spec_with, train
from tests.unit.trainers.tiny_llama import hf_spec, logits, save_tiny_llama, write_corpus

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

LORA = {"r": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def test_lora_under_fsdp_with_checkpointing_in_bf16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "data"
    save_tiny_llama(data_dir / "llama")
    write_corpus(data_dir)
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    spec = spec_with(
        hf_spec(lora=LORA),
        train={"lr": 0.05, "max_steps": 16},
        parallel={"strategy": "fsdp", "num_gpus": 1},
        performance={"activation_checkpointing": True},
    )
    spec["precision"] = "bf16"
    run = train(tmp_path / "run", spec, nproc=1, cuda_devices="0")
    loss = run.metric("loss")
    assert all(math.isfinite(value) for _, value in loss) and loss[-1][1] < loss[0][1], loss
    assert run.metric("tokens_per_s") and run.metric("mfu"), "a GPU of the peak table reports MFU"
    with tarfile.open(run.run_dir / "export.tar") as archive:
        archive.extractall(tmp_path / "export", filter="data")
    ids = torch.arange(12).reshape(2, 6) % 20
    assert torch.isfinite(logits(tmp_path / "export", ids)).all()

"""Program jobs on real GPUs: examples/program_ddp under ddp (NCCL) on two GPUs with bf16 autocast, and under
fsdp, where ty.prepare rebuilds the optimizer over the sharded parameters; each reports every 5 steps, its
loss falls, and its last checkpoint holds the whole model.

Skipped without CUDA (the 2-GPU ones with fewer); run on the device machine:
    python3 -m pytest -q tests/gpu/test_program_gpu.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.integration.trainer_helpers import spec_with, train

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "program_ddp"
SPEC: dict[str, Any] = {**json.loads((EXAMPLE / "spec.json").read_text()), "code": "sha256:" + "0" * 64}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_the_example_trains_on_two_gpus_in_bf16(tmp_path: Path, strategy: str) -> None:
    spec = spec_with(SPEC, parallel={"strategy": strategy, "nproc_per_node": None, "gpus": [0, 1]})
    run = train(tmp_path / strategy, {**spec, "precision": "bf16"}, 2, cuda_devices="0,1", code_dir=EXAMPLE)
    loss = run.metric("loss")
    assert [step for step, _ in loss] == list(range(5, 41, 5))
    assert loss[-1][1] < loss[0][1] / 2
    assert set(run.final_checkpoint()["model"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}

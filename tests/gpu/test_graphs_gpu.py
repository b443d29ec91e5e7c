"""performance.cuda_graphs on real GPUs: the captured step trains as the eager one does.

Skipped without CUDA; run on the device machine:
    .venv/bin/python -m pytest -q tests/gpu/test_graphs_gpu.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from jobspec.events import WarningEvent
from tests.integration.trainer_helpers import TrainerRun, spec_with, train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

STEPS = 60
BASE: dict[str, Any] = {
    "name": "graphs",
    "model": {"arch": "small_cnn"},
    # 100 samples in batches of 32: an epoch every 3 steps, so replays go on across reshuffled epochs.
    "data": {
        "dataset": "synthetic",
        "num_samples": 100,
        "image_size": 32,
        "num_classes": 10,
        "val_fraction": 0,
    },
    "train": {"max_steps": STEPS, "batch_size": 32, "lr": 0.05, "seed": 0, "eval_every_epochs": 0},
    "precision": "bf16",
    "parallel": {"strategy": "single", "num_gpus": 1},
    "checkpoint": {"every_n_epochs": 0, "every_n_steps": 0, "save_final": True},
    "metrics": {"every_n_steps": 10},
}


def run(tmp_path: Path, graphs: str, nproc: int = 1, **sections: dict[str, Any]) -> TrainerRun:
    spec = spec_with(BASE, performance={"cuda_graphs": graphs}, **sections)
    return train(tmp_path / graphs, spec, nproc=nproc, cuda_devices="0,1")


def graph_notes(result: TrainerRun) -> list[WarningEvent]:
    return [e for e in result.events() if isinstance(e, WarningEvent) and e.reason == "cuda_graphs"]


def assert_same_curve(ours: list[tuple[int, float]], eager: list[tuple[int, float]]) -> None:
    assert [step for step, _ in ours] == [step for step, _ in eager]
    # bf16 kernels, and cuDNN may autotune to other algorithms run to run: not bit for bit.
    for (step, a), (_, b) in zip(ours, eager, strict=True):
        assert a == pytest.approx(b, rel=0.03), (step, ours, eager)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_captured_step_trains_the_eager_curve(tmp_path: Path, optimizer: str) -> None:
    train_section = {"optimizer": optimizer, "lr": 0.05 if optimizer == "sgd" else 3e-3}
    captured = run(tmp_path, "on", train=train_section).metric("loss")
    eager = run(tmp_path, "off", train=train_section).metric("loss")
    assert len(captured) == STEPS // 10 and captured[-1][1] < captured[0][1], captured
    assert_same_curve(captured, eager)


def test_auto_says_what_it_decided(tmp_path: Path) -> None:
    result = run(tmp_path, "auto")
    warnings = graph_notes(result)
    assert len(warnings) == 1 and "performance.cuda_graphs=auto" in warnings[0].message, warnings
    assert result.metric("loss")[-1][1] < result.metric("loss")[0][1]


DDP_VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "plain": {},
    # Micro-steps under no_sync, then the all-reduce, all inside the one graph.
    "accumulating": {"train": {"grad_accum_steps": 2}},
    # SyncBatchNorm's statistics all-gather is captured in the forward.
    "sync_batchnorm": {"parallel": {"strategy": "ddp", "num_gpus": 2, "sync_batchnorm": True}},
}


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("variant", sorted(DDP_VARIANTS))
def test_ddp_captures_the_all_reduce_and_trains_the_eager_curve(tmp_path: Path, variant: str) -> None:
    sections = {"parallel": {"strategy": "ddp", "num_gpus": 2}, **DDP_VARIANTS[variant]}
    captured = run(tmp_path, "on", nproc=2, **sections)
    eager = run(tmp_path, "off", nproc=2, **sections)
    losses = captured.metric("loss")
    assert len(losses) == STEPS // 10 and losses[-1][1] < losses[0][1], losses
    assert_same_curve(losses, eager.metric("loss"))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_auto_under_ddp_trains_to_the_end_on_one_decision(tmp_path: Path) -> None:
    # Ranks deciding apart would pair a replayed all-reduce with an eager one: a hang or a failed run.
    result = run(tmp_path, "auto", nproc=2, parallel={"strategy": "ddp", "num_gpus": 2})
    assert len(graph_notes(result)) == 1
    assert result.metric("loss")[-1][1] < result.metric("loss")[0][1]

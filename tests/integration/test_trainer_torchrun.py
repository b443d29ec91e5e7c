"""The trainer under real torchrun: 2 gloo ranks on CPU, as the worker launches it.

One 2-rank DDP run of an MLP on digits (3 epochs x 25 steps) is the reference; the other runs change one
thing each and are compared with it: a resume from its step-40 checkpoint, a single process with the same
global batch, gradient accumulation over 4 micro-steps, and bf16. fp32 runs are compared with rtol 1e-5 on
the loss curves and the final parameter sum: they see the same samples per step and differ only in the
order of floating-point sums, which over 75 steps moved the curves by at most 4e-7 (measured). A wrong
shard, a missing 1/k on accumulated losses or a skipped batch on resume moves them by percents. The
parameter sum is taken from each run's final checkpoint (rank 0's replica); the other rank's replica shows
in the curves, whose losses and evaluations sum over both ranks' shards, each run on its own replica.
"""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from jobspec.events import CheckpointRemovedEvent, DoneEvent, MetricsEvent, PhaseEvent
from tests.integration.trainer_helpers import (
    TrainerRun,
    launch,
    spec_with,
    train,
    train_together,
    write_config,
)

pytestmark = pytest.mark.integration

RTOL = 1e-5
STEPS = 75  # digits: 1617 training samples -> 808 per rank -> 25 steps of 32 per rank per epoch

REFERENCE: dict[str, Any] = {
    "name": "digits-mlp",
    "model": {"arch": "mlp", "kwargs": {"hidden": 64, "depth": 2}},
    "data": {"dataset": "digits", "val_fraction": 0.1},
    "train": {"epochs": 3, "batch_size": 64, "lr": 0.05, "momentum": 0.9, "seed": 0},
    "parallel": {"strategy": "ddp", "nproc_per_node": 2},
    "checkpoint": {"every_n_steps": 20, "every_n_epochs": 1, "keep_last": 4},
    "metrics": {"every_n_steps": 5},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    """The reference and the runs compared with it from the start, side by side."""
    ddp, single, accumulated = train_together(
        partial(train, tmp_path_factory.mktemp("ddp"), REFERENCE, nproc=2),
        partial(
            train,
            tmp_path_factory.mktemp("single"),
            spec_with(REFERENCE, parallel={"strategy": "single", "nproc_per_node": 1}),
            nproc=1,
        ),
        partial(
            train,
            tmp_path_factory.mktemp("accumulated"),
            spec_with(REFERENCE, train={"grad_accum_steps": 4}),
            nproc=2,
        ),
    )
    return {"ddp": ddp, "single": single, "accumulated": accumulated}


@pytest.fixture(scope="module")
def ddp(runs: dict[str, TrainerRun]) -> TrainerRun:
    return runs["ddp"]


def assert_same_curve(a: list[tuple[int, float]], b: list[tuple[int, float]], rtol: float) -> None:
    assert [step for step, _ in a] == [step for step, _ in b]
    for (step, x), (_, y) in zip(a, b, strict=True):
        assert math.isclose(x, y, rel_tol=rtol), f"step {step}: {x} vs {y}"


def test_ddp_loss_falls_and_every_event_parses(ddp: TrainerRun) -> None:
    events = ddp.events()
    assert isinstance(events[0], PhaseEvent) and events[0].phase == "running"
    assert isinstance(events[-1], DoneEvent) and events[-1].step == STEPS
    loss = ddp.metric("loss")
    assert [step for step, _ in loss] == list(range(5, STEPS + 1, 5))
    assert loss[-1][1] < 0.25 * loss[0][1], loss
    accuracy = ddp.metric("eval_accuracy")
    assert [step for step, _ in accuracy] == [25, 50, 75] and accuracy[-1][1] > 0.9, accuracy
    for name in ("lr", "samples_per_s", "step_time_s", "peak_mem_mb", "eval_loss"):
        assert all(value > 0 for _, value in ddp.metric(name)), name
    assert {e.total_steps for e in events if isinstance(e, MetricsEvent)} == {STEPS}
    assert {e.epoch for e in events if isinstance(e, MetricsEvent) and e.step == 50} == {2}


def test_checkpoints_follow_the_cadence_and_keep_last(ddp: TrainerRun) -> None:
    assert ddp.checkpoint_steps() == [20, 25, 40, 50, 60, 75]
    removed = [e.path for e in ddp.events() if isinstance(e, CheckpointRemovedEvent)]
    assert removed == ["checkpoints/step-00000020.pt", "checkpoints/step-00000025.pt"]
    files = sorted(p.name for p in (ddp.run_dir / "checkpoints").iterdir())
    kept = [f"step-{step:08d}.pt" for step in (40, 50, 60, 75)]
    assert files == sorted(kept + [f"{name}.sha256" for name in kept]), "a pruned file's sha256 goes with it"
    state = torch.load(ddp.run_dir / "checkpoints" / kept[-1], weights_only=True)
    assert state["step"] == STEPS and state["epoch"] == 3 and state["name"] == "digits-mlp"
    assert not any(key.startswith(("module.", "_orig_mod.")) for key in state["model"])


def test_resume_continues_at_the_next_step_and_ends_where_the_reference_did(
    ddp: TrainerRun, tmp_path: Path
) -> None:
    checkpoint = ddp.run_dir / "checkpoints" / "step-00000040.pt"
    resumed = train(tmp_path, spec_with(REFERENCE, metrics={"every_n_steps": 1}), 2, resume_path=checkpoint)
    # Step 40 is 15 steps into epoch 2: the resumed run must skip exactly those batches of that epoch.
    assert [step for step, _ in resumed.metric("loss")] == list(range(41, STEPS + 1))
    assert [step for step, _ in resumed.metric("eval_accuracy")] == [50, 75]
    assert math.isclose(resumed.parameter_sum(), ddp.parameter_sum(), rel_tol=1e-9)
    assert_same_curve(resumed.metric("eval_loss"), ddp.metric("eval_loss")[1:], RTOL)


def test_one_process_and_two_ddp_ranks_follow_the_same_curve(
    ddp: TrainerRun, runs: dict[str, TrainerRun]
) -> None:
    single = runs["single"]
    assert_same_curve(single.metric("loss"), ddp.metric("loss"), RTOL)
    assert_same_curve(single.metric("eval_loss"), ddp.metric("eval_loss"), RTOL)
    assert math.isclose(single.parameter_sum(), ddp.parameter_sum(), rel_tol=RTOL)


def test_accumulating_four_micro_steps_matches_one_full_step(
    ddp: TrainerRun, runs: dict[str, TrainerRun]
) -> None:
    accumulated = runs["accumulated"]
    assert_same_curve(accumulated.metric("loss"), ddp.metric("loss"), RTOL)
    assert math.isclose(accumulated.parameter_sum(), ddp.parameter_sum(), rel_tol=RTOL)


def test_bf16_small_cnn_on_cpu_trains(tmp_path: Path) -> None:
    spec = {
        "name": "bf16",
        "model": {"arch": "small_cnn", "kwargs": {"channels": 8}},
        "data": {"dataset": "synthetic", "num_samples": 512, "num_classes": 4, "image_size": 16},
        "train": {
            "max_steps": 12,
            "batch_size": 32,
            "lr": 0.05,
            "grad_accum_steps": 2,
            "clip_grad_norm": 1.0,
        },
        "parallel": {"nproc_per_node": 2},
        "precision": "bf16",
        "performance": {"channels_last": True},
        "checkpoint": {"every_n_epochs": 0},
        "metrics": {"every_n_steps": 4},
    }
    run = train(tmp_path, spec, 2)
    loss = run.metric("loss")
    assert [step for step, _ in loss] == [4, 8, 12]
    assert all(math.isfinite(value) for _, value in loss) and loss[-1][1] < loss[0][1], loss
    assert run.checkpoint_steps() == [12]


def test_a_failing_rank_records_its_error_for_the_worker(tmp_path: Path) -> None:
    spec = spec_with(
        REFERENCE, train={"batch_size": 2048}, parallel={"strategy": "single", "nproc_per_node": 1}
    )
    write_config(tmp_path, spec)
    assert launch(tmp_path, nproc=1).returncode != 0
    error = json.loads((tmp_path / "error.json").read_text())
    assert "lower train.batch_size" in json.dumps(error)
    assert "lower train.batch_size" in (tmp_path / "logs" / "rank0.log").read_text()

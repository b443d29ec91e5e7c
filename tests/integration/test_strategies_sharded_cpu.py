"""fsdp (2 gloo ranks) and hogwild (2 worker processes) on the CPU, under real torchrun as the worker runs it.

fsdp is checked against single: an fsdp checkpoint resumed in a single process, and that run's checkpoint
resumed under fsdp again, must continue the same loss curve (same samples per step; only the order of
floating-point sums differs). Clipping is active throughout, so a norm taken per shard instead of over the
whole model would bend the fsdp curve away from single's.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from jobspec.events import CHECKPOINT_DIR, EVENTS_FILE, DoneEvent, MetricsEvent
from tests.integration.trainer_helpers import Started, TrainerRun, spec_with, start, train, write_config
from trainers.checkpoint import checkpoint_name

pytestmark = pytest.mark.integration

DIGITS_MLP: dict[str, Any] = {
    "name": "sharded",
    "model": {"arch": "mlp", "kwargs": {"hidden": 64, "depth": 2}},
    "data": {"dataset": "digits", "val_fraction": 0.1},
    "train": {"epochs": 2, "batch_size": 64, "lr": 0.05, "momentum": 0.9, "seed": 0, "clip_grad_norm": 0.5},
    "checkpoint": {"every_n_steps": 20, "every_n_epochs": 0, "keep_last": 5},
    "metrics": {"every_n_steps": 5},
}
FSDP = spec_with(DIGITS_MLP, parallel={"strategy": "fsdp", "nproc_per_node": 2})
SINGLE = spec_with(DIGITS_MLP, parallel={"strategy": "single"})
HOGWILD = spec_with(
    DIGITS_MLP,
    train={"epochs": 3, "clip_grad_norm": None},
    parallel={"strategy": "hogwild", "nproc_per_node": 2},
)


def checkpoint(run: TrainerRun, step: int) -> Path:
    return run.run_dir / CHECKPOINT_DIR / checkpoint_name(step)


def after(curve: list[tuple[int, float]], step: int) -> list[tuple[int, float]]:
    return [(s, v) for s, v in curve if s > step]


def assert_close_curves(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> None:
    assert [s for s, _ in a] == [s for s, _ in b] and a
    for (step, x), (_, y) in zip(a, b, strict=True):
        assert math.isclose(x, y, rel_tol=1e-4), f"step {step}: {x} vs {y}"


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory: pytest.TempPathFactory) -> TrainerRun:
    return train(tmp_path_factory.mktemp("fsdp"), FSDP, nproc=2)


def test_fsdp_trains_and_saves_bare_full_checkpoints(fsdp: TrainerRun) -> None:
    loss = fsdp.metric("loss")
    assert loss[-1][1] < 0.3 * loss[0][1], loss
    assert fsdp.metric("eval_accuracy")[-1][1] > 0.85
    assert fsdp.checkpoint_steps() == [20, 40, 50]
    state = torch.load(checkpoint(fsdp, 50), weights_only=True)
    shapes = {key: tuple(value.shape) for key, value in state["model"].items()}
    assert shapes == {
        "1.weight": (64, 64),
        "1.bias": (64,),
        "3.weight": (64, 64),
        "3.bias": (64,),
        "5.weight": (10, 64),
        "5.bias": (10,),
    }
    momentum = state["optimizer"]["state"][0]["momentum_buffer"]
    assert type(momentum) is torch.Tensor and momentum.shape == (64, 64)


def test_fsdp_checkpoint_resumes_under_single_and_back(fsdp: TrainerRun, tmp_path: Path) -> None:
    single = train(tmp_path / "single", SINGLE, nproc=1, resume_path=checkpoint(fsdp, 20))
    assert_close_curves(single.metric("loss"), after(fsdp.metric("loss"), 20))
    back = train(tmp_path / "back", FSDP, nproc=2, resume_path=checkpoint(single, 40))
    assert_close_curves(back.metric("loss"), after(fsdp.metric("loss"), 40))


def wait_gone(run: Started, timeout_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while (left := run.processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture(scope="module")
def hogwild(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TrainerRun, list[psutil.Process]]]:
    """The run, and what was left of it once its torchrun had exited."""
    run_dir = tmp_path_factory.mktemp("hogwild")
    write_config(run_dir, HOGWILD)
    started = start(run_dir, 1)
    try:
        code = started.process.wait(240)
        assert code == 0, started.output.read_text(errors="replace")
        yield TrainerRun(run_dir, 1), wait_gone(started, timeout_s=5)
    finally:
        started.stop()


def test_hogwild_trains_counts_steps_and_leaves_no_process(
    hogwild: tuple[TrainerRun, list[psutil.Process]],
) -> None:
    run, left = hogwild
    assert left == []
    loss = run.metric("loss")
    # digits: 1617 samples -> 808 per worker -> 25 steps of 32 per worker per epoch; 3 epochs.
    assert [step for step, _ in loss] == list(range(5, 76, 5))
    assert loss[-1][1] < 0.3 * loss[0][1], loss
    assert [step for step, _ in run.metric("eval_accuracy")] == [25, 50, 75]
    assert run.metric("eval_accuracy")[-1][1] > 0.85
    assert all(value > 0 for _, value in run.metric("samples_per_s"))
    last = run.events()[-1]
    assert isinstance(last, DoneEvent) and last.step == 75
    assert run.checkpoint_steps() == [20, 40, 60, 75]


def test_hogwild_resumes_from_its_checkpoint(
    hogwild: tuple[TrainerRun, list[psutil.Process]], tmp_path: Path
) -> None:
    run, _ = hogwild
    resumed = train(tmp_path / "resumed", HOGWILD, nproc=1, resume_path=checkpoint(run, 60))
    loss = resumed.metric("loss")
    assert [step for step, _ in loss] == [65, 70, 75]
    # Picks up trained weights: already far below the untrained loss the first run started from.
    assert max(value for _, value in loss) < 0.5 * run.metric("loss")[0][1], loss
    assert resumed.checkpoint_steps() == [75]


def wait_for_metrics(run: Started) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and run.process.poll() is None:
        events = run.mark.run_dir / EVENTS_FILE
        if events.exists() and '"kind": "metrics"' in events.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"no metrics before the deadline; exit code {run.process.poll()}")


def hogwild_workers(run: Started) -> list[psutil.Process]:
    """The worker processes: spawned, each a fresh interpreter (multiprocessing's spawn_main)."""
    return [p for p in run.processes() if any("spawn_main" in arg for arg in p.cmdline())]


LONG_HOGWILD = spec_with(HOGWILD, train={"epochs": 200}, checkpoint={"every_n_steps": 0, "save_final": True})


def test_hogwild_workers_die_with_a_killed_main_process(tmp_path: Path) -> None:
    write_config(tmp_path, LONG_HOGWILD)
    run = start(tmp_path, 1)
    try:
        wait_for_metrics(run)
        workers = hogwild_workers(run)
        # torchrun's one rank, the main process: the workers' parent.
        (main,) = {worker.parent() for worker in workers}
        assert main is not None and len(workers) >= 2
        main.send_signal(signal.SIGKILL)
        assert wait_gone(run, timeout_s=20) == []
    finally:
        run.stop()


def test_hogwild_stops_on_sigterm_after_a_checkpoint(tmp_path: Path) -> None:
    write_config(tmp_path, LONG_HOGWILD)
    run = start(tmp_path, 1)
    try:
        wait_for_metrics(run)
        for p in run.processes():  # as a cancel does: every process of the job
            p.send_signal(signal.SIGTERM)
        assert run.process.wait(timeout=60) != 0
        assert wait_gone(run, timeout_s=10) == []
    finally:
        run.stop()
    stopped = TrainerRun(tmp_path, 1)
    (stopped_at,) = stopped.checkpoint_steps()
    assert stopped_at % 5 == 0 and stopped_at < 200 * 25
    assert not any(isinstance(e, DoneEvent) for e in stopped.events())
    assert max(e.step for e in stopped.events() if isinstance(e, MetricsEvent)) == stopped_at

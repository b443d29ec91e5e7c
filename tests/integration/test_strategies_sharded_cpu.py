"""fsdp (2 gloo ranks) and hogwild (2 worker processes) on the CPU, under real torchrun as the worker runs it.

fsdp is checked against single: an fsdp checkpoint resumed in a single process, and that run's checkpoint
resumed under fsdp again, must continue the same loss curve (same samples per step; only the order of
floating-point sums differs). Clipping is active throughout, so a norm taken per shard instead of over the
whole model would bend the fsdp curve away from single's.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from jobspec.events import CHECKPOINT_DIR, EVENTS_FILE, DoneEvent, MetricsEvent
from tests.integration.trainer_helpers import ROOT, TrainerRun, spec_with, train, write_config
from trainers.checkpoint import checkpoint_name

pytestmark = pytest.mark.integration

TOKEN_ENV = "TRAINYARD_JOB_TOKEN"
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


@pytest.fixture
def job_token(monkeypatch: pytest.MonkeyPatch) -> str:
    """Every process of the run inherits it, as from the worker's launch; launch copies os.environ."""
    token = f"test-hogwild-{uuid.uuid4()}"
    monkeypatch.setenv(TOKEN_ENV, token)
    return token


def job_processes(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TOKEN_ENV) == token:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_gone(token: str, timeout_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while (left := job_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture(scope="module")
def hogwild(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TrainerRun, str]]:
    token = f"test-hogwild-{uuid.uuid4()}"
    os.environ[TOKEN_ENV] = token
    try:
        yield train(tmp_path_factory.mktemp("hogwild"), HOGWILD, nproc=1), token
    finally:
        del os.environ[TOKEN_ENV]


def test_hogwild_trains_counts_steps_and_leaves_no_process(hogwild: tuple[TrainerRun, str]) -> None:
    run, token = hogwild
    assert wait_gone(token, timeout_s=5) == []
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


def test_hogwild_resumes_from_its_checkpoint(hogwild: tuple[TrainerRun, str], tmp_path: Path) -> None:
    run, _ = hogwild
    resumed = train(tmp_path / "resumed", HOGWILD, nproc=1, resume_path=checkpoint(run, 60))
    loss = resumed.metric("loss")
    assert [step for step, _ in loss] == [65, 70, 75]
    # Picks up trained weights: already far below the untrained loss the first run started from.
    assert max(value for _, value in loss) < 0.5 * run.metric("loss")[0][1], loss
    assert resumed.checkpoint_steps() == [75]


def start(run_dir: Path, spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    write_config(run_dir, spec)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    argv += ["--max-restarts", "0", "-m", "trainers.run", "--run-dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for_metrics(run_dir: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        events = run_dir / EVENTS_FILE
        if events.exists() and '"kind": "metrics"' in events.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"no metrics before the deadline; exit code {proc.poll()}")


LONG_HOGWILD = spec_with(HOGWILD, train={"epochs": 200}, checkpoint={"every_n_steps": 0, "save_final": True})


def test_hogwild_workers_die_with_a_killed_main_process(job_token: str, tmp_path: Path) -> None:
    proc = start(tmp_path, LONG_HOGWILD)
    try:
        wait_for_metrics(tmp_path, proc)
        # torchrun's one rank: the process that runs trainers.run (torchrun's own argv names it too).
        (main,) = [p for p in job_processes(job_token) if p.cmdline()[1:4] == ["-u", "-m", "trainers.run"]]
        assert len(main.children()) >= 2
        main.send_signal(signal.SIGKILL)
        assert wait_gone(job_token, timeout_s=20) == []
    finally:
        proc.kill()
        proc.wait()


def test_hogwild_stops_on_sigterm_after_a_checkpoint(job_token: str, tmp_path: Path) -> None:
    proc = start(tmp_path, LONG_HOGWILD)
    try:
        wait_for_metrics(tmp_path, proc)
        for p in job_processes(job_token):  # as a cancel does: every process of the job
            p.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) != 0
        assert wait_gone(job_token, timeout_s=10) == []
    finally:
        proc.kill()
        proc.wait()
    run = TrainerRun(tmp_path, 1)
    (stopped_at,) = run.checkpoint_steps()
    assert stopped_at % 5 == 0 and stopped_at < 200 * 25
    assert not any(isinstance(e, DoneEvent) for e in run.events())
    assert max(e.step for e in run.events() if isinstance(e, MetricsEvent)) == stopped_at

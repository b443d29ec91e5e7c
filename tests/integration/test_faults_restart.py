"""Fault injection under real torchrun (2 gloo ranks): a rank SIGKILLed mid-job restarts from the latest
checkpoint and matches an uninterrupted run; max_runtime ends in timed_out after a final checkpoint.
A recorded exception not being restarted is tests/unit/worker/test_faults_restart.py (fake trainer)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.integration.jobs import (
    example_spec,
    job_processes,
    metric_values,
    rank_processes,
    submit,
    wait_status,
)
from tests.integration.servers import Stack

# Checkpoints every 20 steps and metrics every 5: a restart resumes at a report boundary, so the resumed
# attempt's loss windows are the same as an uninterrupted run's. 16 epochs are 352 steps: a rank is hit once
# the API shows step 50 (it lags the trainer by up to half a second, 50-odd steps here), and the steps left
# keep the job running well past the hit.
RESTARTABLE = example_spec(
    "digits_ddp_cpu.json",
    model={"kwargs": {"hidden": 512, "depth": 3}},
    train={"epochs": 16},
    checkpoint={"every_n_epochs": 0, "every_n_steps": 20, "keep_last": 2},
    limits={"max_restarts": 2},
)
# Same-seed runs on CPU gloo repeat exactly; the tolerance only absorbs summation order in the reduction.
LOSS_RTOL = 1e-4


def runs_dir(stack: Stack) -> Path:
    return Path(stack.env["TRAINYARD_RUNS_DIR"])


def rank_process(stack: Stack, job_id: int, rank: int) -> psutil.Process:
    found = rank_processes(runs_dir(stack), job_id, rank)
    assert found, f"no rank {rank} process for job {job_id}"
    return found[0]


def wait_step(stack: Stack, job_id: int, step: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    with stack.client() as client:
        while time.monotonic() < deadline:
            job = client.get(f"/v1/jobs/{job_id}").json()
            if job["progress"]["step"] >= step:
                return
            assert job["status"] in ("queued", "starting", "running"), job
            time.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached step {step}")


def hit_rank_at_step_50(
    stack: Stack, spec: dict[str, Any], sig: signal.Signals, finish_timeout: float = 180
) -> tuple[dict[str, Any], list[dict[str, Any]], psutil.Process]:
    """Submit `spec`, send `sig` to rank 1 once the job shows step 50, and wait for it to succeed; returns
    the job, its events and the process hit."""
    with stack.client() as client:
        job_id = submit(client, spec)["id"]
        wait_status(client, job_id, {"running"}, timeout=120)
        # Found before the step is reached, so the signal follows the step with no process scan in between.
        victim = rank_process(stack, job_id, 1)
        wait_step(stack, job_id, 50)
        os.kill(victim.pid, sig)
        job = wait_status(client, job_id, {"succeeded"}, timeout=finish_timeout)
        events = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
    return job, events, victim


def losses(stack: Stack, job_id: int) -> list[tuple[int, float]]:
    with stack.client() as client:
        return metric_values(client, job_id, "loss")


# The max_runtime test's job needs no test to act on it mid-run, only time to pass. The limit counts training
# once the job runs (its start-up is added, tests/unit/worker/test_runtime_deadline.py), so its seconds are
# seconds of steps (dozens at the least, so the final checkpoint is past step 0): every second of it is a
# rank's CPU, so it has one rank. Until its first step, though, the limit counts from its placement: a
# start-up longer than the limit times the job out before any step, as a loaded CI box's did with 5 s.
RUNTIME_LIMITED = {
    **RESTARTABLE,
    "parallel": {"strategy": "single"},
    "train": {**RESTARTABLE["train"], "epochs": 2000},
    "checkpoint": {"every_n_epochs": 0, "every_n_steps": 0, "save_final": False},
    "limits": {"max_runtime_s": 15},
}


# The jobs of the next two fixtures are submitted before the first test's own job and awaited only by the
# test that checks them, so they run while the fault tests' jobs wait out their faults (a stopped rank: 10 s
# of collective timeout, then 30 s of torchrun's grace before its SIGKILL) rather than after them.
@pytest.fixture(scope="module", autouse=True)
def runtime_limited(embedded_stack: Stack) -> int:
    with embedded_stack.client() as client:
        return int(submit(client, RUNTIME_LIMITED)["id"])


@pytest.fixture(scope="module")
def reference(embedded_stack: Stack) -> int:
    """The uninterrupted run the faulted ones must match; `reference_losses` waits for it."""
    with embedded_stack.client() as client:
        return int(submit(client, RESTARTABLE)["id"])


def reference_losses(stack: Stack, job_id: int) -> list[tuple[int, float]]:
    with stack.client() as client:
        job = wait_status(client, job_id, {"succeeded"})
    assert job["attempt"] == 1, job
    return losses(stack, job_id)


def test_a_rank_hanging_in_a_collective_times_out_and_restarts(embedded_stack: Stack, reference: int) -> None:
    """Rank 1 stopped (SIGSTOP) mid-job: rank 0 waits in its all-reduce until limits.collective_timeout_s,
    fails with a communication error, and the job restarts from its checkpoint."""
    spec = {**RESTARTABLE, "limits": {**RESTARTABLE["limits"], "collective_timeout_s": 10}}
    job, events, hung = hit_rank_at_step_50(embedded_stack, spec, signal.SIGSTOP, finish_timeout=300)
    assert job["attempt"] == 2, job
    restart = next(e for e in events if e["to_status"] == "restarting")
    assert restart["reason"] == "communication_error", restart
    steps = [step for step, _ in losses(embedded_stack, job["id"])]
    expected = reference_losses(embedded_stack, reference)
    assert steps == sorted(set(steps)) == [step for step, _ in expected], "duplicate or missing steps"
    assert not hung.is_running() or hung.status() == psutil.STATUS_ZOMBIE, "the stopped rank outlived its job"


def test_a_killed_rank_restarts_from_its_checkpoint_like_an_uninterrupted_run(
    embedded_stack: Stack, reference: int
) -> None:
    job, events, _ = hit_rank_at_step_50(embedded_stack, RESTARTABLE, signal.SIGKILL)
    assert job["attempt"] == 2, job
    restart = next(e for e in events if e["to_status"] == "restarting")
    # The rank killed, not its peer's "Connection reset" that often reaches the error file first.
    assert restart["reason"] == "crash", restart
    assert "rank 1 was killed by signal SIGKILL" in restart["message"], restart
    assert [e["to_status"] for e in events].count("restarting") == 1
    curve = losses(embedded_stack, job["id"])
    expected = reference_losses(embedded_stack, reference)
    steps = [step for step, _ in curve]
    assert steps == sorted(set(steps)) == [step for step, _ in expected], "duplicate or missing steps"
    for (step, value), (_, want) in zip(curve, expected, strict=True):
        assert value == pytest.approx(want, rel=LOSS_RTOL), step


def test_max_runtime_times_out_after_a_final_checkpoint(embedded_stack: Stack, runtime_limited: int) -> None:
    with embedded_stack.client() as client:
        job = wait_status(client, runtime_limited, {"timed_out"}, timeout=180)
        checkpoints = client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["data"]
    assert job["status_reason"] == "max_runtime"
    # No checkpoint was due by the spec: the one there is the final one, written on the worker's SIGTERM.
    assert len(checkpoints) == 1 and checkpoints[0]["step"] > 0, checkpoints
    assert not job_processes(runs_dir(embedded_stack), job["id"])

"""Fault injection under real torchrun (2 gloo ranks): a rank SIGKILLed mid-job restarts from the latest
checkpoint and matches an uninterrupted run; max_runtime ends in timed_out after a final checkpoint.
A recorded exception not being restarted is tests/unit/test_faults_restart.py (runner, fake trainer)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.jobs import example_spec, job_processes, metric_values, submit, wait_status
from tests.integration.servers import Stack

# Checkpoints every 20 steps and metrics every 5: a restart resumes at a report boundary, so the resumed
# attempt's loss windows are the same as an uninterrupted run's.
RESTARTABLE = example_spec(
    "digits_ddp_cpu.json",
    model={"kwargs": {"hidden": 512, "depth": 3}},
    train={"epochs": 30},
    checkpoint={"every_n_epochs": 0, "every_n_steps": 20, "keep_last": 2},
    limits={"max_restarts": 2},
)
# Same-seed runs on CPU gloo repeat exactly; the tolerance only absorbs summation order in the reduction.
LOSS_RTOL = 1e-4


def runs_dir(stack: Stack) -> Path:
    return Path(stack.env["TRAINYARD_RUNS_DIR"])


def rank_process(stack: Stack, job_id: int, rank: int) -> psutil.Process:
    for proc in job_processes(runs_dir(stack), job_id):
        try:
            if proc.environ().get("RANK") == str(rank) and "trainers.run" in proc.cmdline():
                return proc
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no rank {rank} process for job {job_id}")


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


def losses(stack: Stack, job_id: int) -> list[tuple[int, float]]:
    with stack.client() as client:
        return metric_values(client, job_id, "loss")


@pytest.fixture(scope="module")
def reference(embedded_stack: Stack) -> list[tuple[int, float]]:
    with embedded_stack.client() as client:
        job = wait_status(client, submit(client, RESTARTABLE)["id"], {"succeeded"})
        assert job["attempt"] == 1
    return losses(embedded_stack, job["id"])


def test_a_killed_rank_restarts_from_its_checkpoint_like_an_uninterrupted_run(
    embedded_stack: Stack, reference: list[tuple[int, float]]
) -> None:
    with embedded_stack.client() as client:
        job_id = submit(client, RESTARTABLE)["id"]
        wait_step(embedded_stack, job_id, 50)
        os.kill(rank_process(embedded_stack, job_id, 1).pid, signal.SIGKILL)
        job = wait_status(client, job_id, {"succeeded"})
        events = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
    assert job["attempt"] == 2, job
    restart = next(e for e in events if e["to_status"] == "restarting")
    assert restart["reason"] in ("crash", "communication_error"), restart
    assert [e["to_status"] for e in events].count("restarting") == 1
    curve = losses(embedded_stack, job_id)
    steps = [step for step, _ in curve]
    assert steps == sorted(set(steps)) == [step for step, _ in reference], "duplicate or missing steps"
    for (step, value), (_, expected) in zip(curve, reference, strict=True):
        assert value == pytest.approx(expected, rel=LOSS_RTOL), step


def test_a_rank_hanging_in_a_collective_times_out_and_restarts(
    embedded_stack: Stack, reference: list[tuple[int, float]]
) -> None:
    """Rank 1 stopped (SIGSTOP) mid-job: rank 0 waits in its all-reduce until limits.collective_timeout_s,
    fails with a communication error, and the job restarts from its checkpoint."""
    spec = {**RESTARTABLE, "limits": {**RESTARTABLE["limits"], "collective_timeout_s": 10}}
    with embedded_stack.client() as client:
        job_id = submit(client, spec)["id"]
        wait_step(embedded_stack, job_id, 50)
        hung = rank_process(embedded_stack, job_id, 1)
        os.kill(hung.pid, signal.SIGSTOP)
        job = wait_status(client, job_id, {"succeeded"}, timeout=300)
        events = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
    assert job["attempt"] == 2, job
    restart = next(e for e in events if e["to_status"] == "restarting")
    assert restart["reason"] == "communication_error", restart
    steps = [step for step, _ in losses(embedded_stack, job_id)]
    assert steps == sorted(set(steps)) == [step for step, _ in reference], "duplicate or missing steps"
    assert not hung.is_running() or hung.status() == psutil.STATUS_ZOMBIE, "the stopped rank outlived its job"


def test_max_runtime_times_out_after_a_final_checkpoint(embedded_stack: Stack) -> None:
    spec = {
        **RESTARTABLE,
        "train": {**RESTARTABLE["train"], "epochs": 2000},
        "checkpoint": {"every_n_epochs": 0, "every_n_steps": 0, "save_final": False},
        "limits": {"max_runtime_s": 30},
    }
    with embedded_stack.client() as client:
        job = wait_status(client, submit(client, spec)["id"], {"timed_out"}, timeout=90)
        checkpoints = client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["data"]
    assert job["status_reason"] == "max_runtime"
    # No checkpoint was due by the spec: the one there is the final one, written on the worker's SIGTERM.
    assert len(checkpoints) == 1 and checkpoints[0]["step"] > 0, checkpoints
    assert not job_processes(runs_dir(embedded_stack), job["id"])

"""Faults of the delivery and of the worker (docs/reliability.md cases 1 and 2), with real processes: two
Celery workers on the embedded broker, a job's doorbell rung several times, and a worker SIGKILLed mid-job."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from core.doorbell import RUN_JOB_TASK
from jobspec.events import EVENTS_FILE
from tests.integration.jobs import example_spec, job_processes, metric_values, submit, wait_status
from tests.integration.servers import SHORT_LEASE, Stack, wait_for

pytestmark = pytest.mark.own_services

QUICK = example_spec("digits_ddp_cpu.json", train={"epochs": 1})
# Long enough to be caught between checkpoints: a few thousand small steps, a checkpoint every 100.
LONG = example_spec(
    "digits_ddp_cpu.json",
    train={"epochs": None, "max_steps": 1500},
    checkpoint={"every_n_epochs": 0, "every_n_steps": 100, "keep_last": 2},
    metrics={"every_n_steps": 50},
)


@pytest.fixture(scope="module")
def two_workers(
    tmp_path_factory: pytest.TempPathFactory, stopping: list[subprocess.Popen[bytes]]
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("two-workers")
    # A short lease so a dead worker's job is noticed within seconds.
    stack = Stack.embedded(workdir, **SHORT_LEASE)
    stack.start_worker("worker-b")
    yield stack
    stopping += stack.terminate()


def ring(stack: Stack, job_id: int, times: int) -> None:
    """Extra deliveries of the same job, as a redelivered or duplicated message would make."""
    broker = Celery(broker=stack.env["TRAINYARD_BROKER_URL"])
    for _ in range(times):
        broker.send_task(RUN_JOB_TASK, args=[job_id], queue="trainyard")


def phases_started(stack: Stack, job_id: int) -> int:
    """How many times a trainer reached its first step: the `phase` lines of the job's event file."""
    events = Path(stack.env["TRAINYARD_RUNS_DIR"]) / str(job_id) / EVENTS_FILE
    return sum('"kind": "phase"' in line for line in events.read_text().splitlines())


def test_a_job_delivered_many_times_to_two_workers_trains_once(two_workers: Stack) -> None:
    with two_workers.client() as client:
        job = submit(client, QUICK)
        ring(two_workers, job["id"], times=4)
        job = wait_status(client, job["id"], {"succeeded"})
        starts = [
            e
            for e in client.get(f"/v1/jobs/{job['id']}/events").json()["data"]
            if e["to_status"] == "starting"
        ]
        assert len(starts) == 1 and job["attempt"] == 1
        assert phases_started(two_workers, job["id"]) == 1


def test_a_sigkilled_worker_s_job_is_requeued_and_resumes(two_workers: Stack) -> None:
    runs_dir = Path(two_workers.env["TRAINYARD_RUNS_DIR"])
    with two_workers.client() as client:
        job = submit(client, LONG)
        wait_status(client, job["id"], {"running"}, timeout=120)
        wait_for(
            lambda: bool(client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["data"]), 60, "checkpoint"
        )
        # Worker ids are "<host>:<pid>"; kill whichever of the two holds the job.
        after_colon = "CAST(substr(worker_id, instr(worker_id, ':') + 1) AS INTEGER)"
        pid = two_workers.sql(f"SELECT {after_colon} FROM jobs WHERE id = {job['id']}")
        holder = next(name for name, proc in two_workers.procs.items() if proc.pid == pid)
        two_workers.procs[holder].kill()
        two_workers.procs[holder].wait()

        job = wait_status(client, job["id"], {"succeeded"}, timeout=240)
        events = client.get(f"/v1/jobs/{job['id']}/events").json()["data"]
        assert ("running", "queued", "worker_lost") in {
            (e["from_status"], e["to_status"], e["reason"]) for e in events
        }
        assert job["attempt"] == 2
        steps = [step for step, _ in metric_values(client, job["id"], "loss")]
        assert steps == sorted(set(steps)) and steps[-1] == 1500
        assert not job_processes(runs_dir, job["id"]), "the first attempt's processes outlived their worker"

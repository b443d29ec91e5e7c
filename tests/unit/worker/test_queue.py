"""The queue: start order, the reasons the worker writes, PATCH priority, and priority in GPU claims."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from core.db import session_scope
from core.models import Job, JobEvent
from core.states import JobStatus
from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec
from tests.unit.conftest import submit
from tests.unit.worker_fixtures import WorkerDb
from worker.executors.local.leases import ClaimOutcome, claim_job
from worker.executors.local.runner import run_job

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell

pytest_plugins = ["tests.unit.worker_fixtures"]


def test_queue_lists_waiting_jobs_in_start_order_with_reasons(client: TestClient, session: Session) -> None:
    low = submit(client, name="low")["id"]
    high = submit(client, name="high", priority=5)["id"]
    running = submit(client, name="running")["id"]
    session.execute(update(Job).where(Job.id == running).values(status=JobStatus.RUNNING))
    session.execute(
        update(Job)
        .where(Job.id == low)
        .values(status_reason="waiting_for_gpus", message="waiting for GPU 1, held by job 7")
    )
    session.commit()
    entries = client.get("/v1/queue").json()["data"]
    assert [(e["position"], e["job_id"], e["priority"]) for e in entries] == [(1, high, 5), (2, low, 0)]
    assert entries[0]["reason"] == "waiting for a worker to take it"
    assert entries[1]["reason"] == "waiting for GPU 1, held by job 7"
    assert entries[1]["status_reason"] == "waiting_for_gpus"
    assert entries[0]["wants"] == "1 CPU core"


def test_patch_priority_reorders_the_queue(client: TestClient) -> None:
    first = submit(client)["id"]
    second = submit(client)["id"]
    response = client.patch(f"/v1/jobs/{second}", json={"priority": 10})
    assert response.status_code == 200, response.text
    assert (response.json()["priority"], response.json()["queue_position"]) == (10, 1)
    assert [e["job_id"] for e in client.get("/v1/queue").json()["data"]] == [second, first]
    assert client.get(f"/v1/jobs/{first}").json()["queue_position"] == 2


def test_queue_position_counts_the_jobs_that_start_first(client: TestClient, session: Session) -> None:
    old, high, new, running = (submit(client, priority=p)["id"] for p in (0, 5, 0, 9))
    session.execute(update(Job).where(Job.id == running).values(status=JobStatus.RUNNING))
    session.commit()
    positions = {job["id"]: job["queue_position"] for job in client.get("/v1/jobs").json()["data"]}
    assert positions == {high: 1, old: 2, new: 3, running: None}
    assert [client.get(f"/v1/jobs/{i}").json()["queue_position"] for i in (old, high, new)] == [2, 1, 3]


def test_patch_priority_refused_once_the_job_left_the_queue(client: TestClient) -> None:
    job_id = submit(client)["id"]
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    response = client.patch(f"/v1/jobs/{job_id}", json={"priority": 3})
    assert response.status_code == 409
    assert "cancelled" in response.json()["detail"] and "queued" in response.json()["detail"]


def test_patch_priority_validates_the_body(client: TestClient) -> None:
    job_id = submit(client)["id"]
    assert client.patch(f"/v1/jobs/{job_id}", json={"priority": 101}).status_code == 422
    assert client.patch(f"/v1/jobs/{job_id}", json={"name": "x", "priority": 1}).status_code == 422
    assert client.patch("/v1/jobs/999", json={"priority": 1}).status_code == 404


def test_lower_priority_job_does_not_take_gpus_a_higher_one_waits_for(database: WorkerDb) -> None:
    holder = database.add_job(database.spec(gpus=[0]))
    assert claim_job(holder).outcome is ClaimOutcome.CLAIMED
    urgent = database.add_job(database.spec(gpus=[0, 1]), priority=5)
    assert claim_job(urgent).outcome is ClaimOutcome.WAITING
    # GPU 1 is free, but the urgent job needs it as soon as GPU 0 frees up.
    later = database.add_job(database.spec(gpus=[1]))
    assert claim_job(later).outcome is ClaimOutcome.WAITING
    assert database.job(later).message == (
        f"waiting for GPU 1, held by job {urgent} (kept for queued job {urgent}, which starts first)"
    )
    # A job that needs none of the reserved GPUs still starts.
    other = database.add_job(database.spec(num_gpus=2))
    claim = claim_job(other)
    assert (claim.outcome, claim.gpu_ids) == (ClaimOutcome.CLAIMED, [2, 3])


def test_the_first_waiting_job_keeps_what_it_waits_for_at_equal_priority(database: WorkerDb) -> None:
    """Issue 33 #6, on GPUs: a later job of the same priority does not take GPU 1, which would hold the
    first waiting job back when GPU 0 frees up; it may take what that job does not need."""
    holder = database.add_job(database.spec(gpus=[0]))
    assert claim_job(holder).outcome is ClaimOutcome.CLAIMED
    waiting = database.add_job(database.spec(gpus=[0, 1]))
    assert claim_job(waiting).outcome is ClaimOutcome.WAITING
    later = database.add_job(database.spec(gpus=[1]))
    assert claim_job(later).outcome is ClaimOutcome.WAITING
    assert f"kept for queued job {waiting}, which starts first" in (database.job(later).message or "")
    elsewhere = database.add_job(database.spec(gpus=[2]))
    assert claim_job(elsewhere).outcome is ClaimOutcome.CLAIMED


def test_what_a_job_waits_for_names_its_hosts_gpus_or_cores() -> None:
    from app.services.queue import wanted_devices

    def wants(**parallel: object) -> str:
        spec = {**WorkerDb.spec(**parallel), "train": {"epochs": 1, "batch_size": 48}}
        return wanted_devices(resolve_plan(JobSpec.model_validate(spec)))

    assert wants(num_gpus=4, nnodes=2, strategy="ddp") == "2 hosts x 4 GPUs"
    assert wants(nproc_per_node=2, nnodes=3, strategy="ddp") == "3 hosts x 2 CPU cores"
    assert wants(gpus=[1, 2]) == "GPUs [1, 2]"
    assert wants(num_gpus=1) == "1 GPU"
    assert wants(strategy="hogwild", nproc_per_node=4) == "4 CPU cores", "one per hogwild worker"


def test_a_doorbell_runs_the_queue_in_start_order(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    """Issue 22 #3: whichever job rang, the task starts the first job in start order, and its slot takes the
    next one as each ends, until the queue is empty."""
    fake_trainer("ok")
    first, second, urgent = (database.add_job(priority=priority) for priority in (0, 0, 100))
    run_job(first)
    with session_scope() as session:
        starts = select(JobEvent.job_id).where(JobEvent.to_status == JobStatus.STARTING).order_by(JobEvent.id)
        assert list(session.scalars(starts)) == [urgent, first, second]
    assert {database.job(job_id).status for job_id in (first, second, urgent)} == {JobStatus.SUCCEEDED}

"""Claiming: a compare-and-set on the job row plus GPU lease rows whose primary key settles every race."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from core.db import session_scope
from core.models import GpuLease, Job, JobEvent
from core.states import JobStatus
from worker.executors.local.leases import (
    WAITING_FOR_GPUS,
    ClaimOutcome,
    claim_job,
    claim_next,
    ring_waiting_jobs,
)

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

from tests.unit.worker_fixtures import race_sixteen_jobs_for_four_gpus

pytest_plugins = ["tests.unit.worker_fixtures"]


def leases() -> dict[int, int]:
    with session_scope() as session:
        return {gpu: job for gpu, job in session.execute(select(GpuLease.gpu_index, GpuLease.job_id))}


def test_claim_moves_to_starting_once(database: WorkerDb) -> None:
    job_id = database.add_job(database.spec(gpus=[1, 2]))
    first = claim_job(job_id)
    assert (first.outcome, first.attempt, first.gpu_ids) == (ClaimOutcome.CLAIMED, 1, [1, 2])
    job = database.job(job_id)
    assert (job.status, job.attempt, job.host, job.gpu_ids) == (JobStatus.STARTING, 1, database.host, [1, 2])
    assert job.heartbeat_at is not None and job.started_at is not None
    # A redelivered message finds the job no longer queued and changes nothing.
    assert claim_job(job_id).outcome is ClaimOutcome.NOT_QUEUED
    assert database.job(job_id).attempt == 1
    assert leases() == {1: job_id, 2: job_id}
    with session_scope() as session:
        events = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id)).all()
        assert [(e.from_status, e.to_status, e.attempt) for e in events] == [("queued", "starting", 1)]


def test_second_job_for_a_held_gpu_waits_and_names_the_holder(database: WorkerDb) -> None:
    first = database.add_job(database.spec(gpus=[0]))
    second = database.add_job(database.spec(gpus=[0, 1]))
    assert claim_job(first).outcome is ClaimOutcome.CLAIMED
    assert claim_job(second).outcome is ClaimOutcome.WAITING
    job = database.job(second)
    assert (job.status, job.status_reason) == (JobStatus.QUEUED, WAITING_FOR_GPUS)
    assert job.message == f"waiting for GPU 0, held by job {first}"
    assert leases() == {0: first}


def test_cpu_job_needs_no_lease(database: WorkerDb) -> None:
    job_id = database.add_job(database.spec(nproc_per_node=2))
    claim = claim_job(job_id)
    assert (claim.outcome, claim.gpu_ids) == (ClaimOutcome.CLAIMED, [])
    assert leases() == {}


def test_gpu_the_host_lacks_is_infeasible(database: WorkerDb) -> None:
    job_id = database.add_job(database.spec(gpus=[2, 5]))
    assert claim_job(job_id).outcome is ClaimOutcome.INFEASIBLE
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.FAILED, "infeasible")
    assert job.message == f"asked for GPUs [2, 5] but host {database.host} has GPUs [0, 1, 2, 3] (no GPU 5)"
    assert leases() == {}


def test_more_gpus_than_the_host_has_is_infeasible(database: WorkerDb) -> None:
    job_id = database.add_job(database.spec(num_gpus=8))
    assert claim_job(job_id).outcome is ClaimOutcome.INFEASIBLE
    assert database.job(job_id).message == f"asked for 8 GPUs but host {database.host} has GPUs [0, 1, 2, 3]"


def test_num_gpus_takes_the_lowest_free_ids(database: WorkerDb) -> None:
    pinned = database.add_job(database.spec(gpus=[0, 2]))
    flexible = database.add_job(database.spec(num_gpus=2))
    claim_job(pinned)
    assert claim_job(flexible).gpu_ids == [1, 3]
    late = database.add_job(database.spec(num_gpus=1))
    assert claim_job(late).outcome is ClaimOutcome.WAITING
    assert (database.job(late).message or "").startswith("waiting for 1 free GPUs, 0 free")


def test_racing_claims_never_share_a_gpu(database: WorkerDb) -> None:
    race_sixteen_jobs_for_four_gpus(database)


def test_ring_waiting_jobs_rings_once_for_the_queue(database: WorkerDb, doorbell: Doorbell) -> None:
    holder = database.add_job(database.spec(gpus=[0]))
    claim_job(holder)
    low = database.add_job(database.spec(gpus=[0]), priority=0)
    high = database.add_job(database.spec(gpus=[0]), priority=5)
    assert ring_waiting_jobs() == high  # for the job that starts first; the worker it wakes claims in order
    assert ring_waiting_jobs() is None  # a ring already waits in the shared queue
    doorbell.rung.clear()  # a worker took it
    assert ring_waiting_jobs(Job.priority == 0) == low
    assert doorbell.rung == [low]


def test_claim_next_takes_the_queue_in_start_order(database: WorkerDb) -> None:
    """Issue 22 #3: CPU jobs need no GPU, so nothing but the order of claims can keep priority."""
    low = database.add_job(priority=0)
    high = database.add_job(priority=100)
    pinned = database.add_job(database.spec(gpus=[0]), priority=100)
    blocked = database.add_job(database.spec(gpus=[0]), priority=100)
    claimed = [claim.job_id for claim in iter(claim_next, None)]
    assert claimed == [high, pinned, low]
    assert database.job(blocked).status_reason == WAITING_FOR_GPUS

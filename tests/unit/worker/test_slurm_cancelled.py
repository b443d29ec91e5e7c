"""A job whose Slurm job someone else cancelled (scancel by the cluster's user or an admin) ends `cancelled`
like any cancel of a started job, through `cancelling`, its GPUs freed; a cancel Trainyard asked for still
ends only a job being cancelled. Real SQLite; the Slurm cluster's own test is in
tests/integration/test_slurm_executor.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from core.db import session_scope
from core.models import GpuLease, JobEvent
from core.states import JobStatus
from core.transitions import move
from worker.attempts.ends import CANCELLED, Outcome, finish
from worker.executors.local.leases import claim_job
from worker.executors.slurm.outcomes import SLURM_CANCELLED

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

OUTSIDE = Outcome(
    JobStatus.CANCELLED, SLURM_CANCELLED, "Slurm job 41 CANCELLED by root (uid 0), outside Trainyard"
)


def running_job(database: WorkerDb) -> int:
    job_id = database.add_job(database.spec(gpus=[0]))
    claim_job(job_id)
    with session_scope() as session:
        move(session, job_id, JobStatus.STARTING, JobStatus.RUNNING)
    return job_id


def moves(job_id: int) -> list[tuple[str | None, str, str | None]]:
    with session_scope() as session:
        rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
        return [(e.from_status, e.to_status, e.reason) for e in rows]


def leased() -> list[int]:
    with session_scope() as session:
        return list(session.scalars(select(GpuLease.job_id)))


def test_a_running_job_cancelled_outside_ends_cancelled_through_cancelling(database: WorkerDb) -> None:
    job_id = running_job(database)
    assert leased() == [job_id]

    assert finish(job_id, 1, OUTSIDE)

    job = database.job(job_id)
    assert (job.status, job.status_reason, job.message) == (
        JobStatus.CANCELLED,
        SLURM_CANCELLED,
        OUTSIDE.message,
    )
    assert job.finished_at is not None
    assert moves(job_id)[-2:] == [
        ("running", "cancelling", SLURM_CANCELLED),
        ("cancelling", "cancelled", SLURM_CANCELLED),
    ]
    assert leased() == []
    assert not finish(job_id, 1, OUTSIDE)  # ended once


def test_a_starting_job_cancelled_outside_ends_cancelled(database: WorkerDb) -> None:
    job_id = database.add_job(database.spec(gpus=[0]))
    claim_job(job_id)
    assert finish(job_id, 1, OUTSIDE)
    assert database.job(job_id).status == JobStatus.CANCELLED
    assert leased() == []


def test_a_cancel_on_request_still_ends_only_a_job_being_cancelled(database: WorkerDb) -> None:
    job_id = running_job(database)
    assert not finish(job_id, 1, CANCELLED)  # a repeated message: nothing moves
    assert database.job(job_id).status == JobStatus.RUNNING
    assert leased() == [job_id]


def test_a_user_s_cancel_under_way_wins_over_slurm_s(database: WorkerDb) -> None:
    job_id = running_job(database)
    with session_scope() as session:
        move(session, job_id, JobStatus.RUNNING, JobStatus.CANCELLING, reason="cancelled_by_user")
    assert finish(job_id, 1, OUTSIDE)
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.CANCELLED, CANCELLED.reason)
    assert leased() == []

"""depends_on: a job waits queued, passed over by placement, until every job it depends on has succeeded, and
is cancelled with dependency_failed, and its own dependants after it, when one ends otherwise. A job's end
only marks it due; the reconciler's pass releases or cancels, and a second pass changes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import func, select

from core.db import session_scope
from core.dependencies import (
    DEPENDENCY_FAILED,
    WAITING_FOR_JOBS,
    catch_ended,
    reconcile_dependencies,
    record_dependencies,
)
from core.models import Job, JobDependency
from core.states import JobStatus
from core.transitions import move
from worker.executors.local.leases import ClaimOutcome, claim_job, claim_next

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


def dependant(database: WorkerDb, *parents: int) -> int:
    """A queued job that waits for `parents`, recorded as a submission records it."""
    job_id = database.add_job()
    with session_scope() as session:
        record_dependencies(session, job_id, list(parents))
    return job_id


def end(job_id: int, status: JobStatus) -> None:
    with session_scope() as session:
        for to_status in (JobStatus.STARTING, JobStatus.RUNNING, status):
            assert move(session, job_id, JobStatus(session.get_one(Job, job_id).status), to_status)


def rows() -> int:
    with session_scope() as session:
        return session.scalar(select(func.count()).select_from(JobDependency)) or 0


def test_a_dependant_waits_until_every_dependency_succeeded(database: WorkerDb, doorbell: Doorbell) -> None:
    first, second = database.add_job(), database.add_job()
    waiting = dependant(database, first, second)
    job = database.job(waiting)
    assert (job.status, job.status_reason, job.waiting_on) == (JobStatus.QUEUED, WAITING_FOR_JOBS, 2)
    assert job.message == f"waiting for jobs {first}, {second} to succeed (depends_on)"
    assert claim_job(waiting).outcome is ClaimOutcome.WAITING

    end(first, JobStatus.SUCCEEDED)
    assert database.job(first).dependants_due
    assert reconcile_dependencies() == [first]
    job = database.job(waiting)
    assert (job.waiting_on, job.message) == (1, f"waiting for job {second} to succeed (depends_on)")
    assert not database.job(first).dependants_due and doorbell.rung == []

    end(second, JobStatus.SUCCEEDED)
    assert reconcile_dependencies() == [second]
    job = database.job(waiting)
    assert (job.status, job.status_reason, job.waiting_on) == (JobStatus.QUEUED, None, 0)
    assert doorbell.rung == [waiting] and rows() == 0
    assert reconcile_dependencies() == []  # nothing left due: a second pass changes nothing
    claimed = claim_next()
    assert claimed is not None and claimed.job_id == waiting


def test_placement_passes_over_a_waiting_job_and_keeps_no_room_for_it(database: WorkerDb) -> None:
    running = database.add_job(database.spec(gpus=[0]))
    assert claim_job(running).outcome is ClaimOutcome.CLAIMED
    # First in start order (priority) and asking for every GPU: were it not waiting, nothing could start.
    waiting = database.add_job(database.spec(gpus=[0, 1, 2, 3]), priority=10)
    with session_scope() as session:
        record_dependencies(session, waiting, [running])
    later = database.add_job(database.spec(gpus=[1]))
    claimed = claim_next()
    assert claimed is not None and claimed.job_id == later
    assert database.job(waiting).status == JobStatus.QUEUED


def test_a_failed_dependency_cancels_its_dependants_and_theirs(
    database: WorkerDb, doorbell: Doorbell
) -> None:
    pretrain, other = database.add_job(), database.add_job()
    finetune = dependant(database, pretrain, other)
    evaluate = dependant(database, finetune)
    end(pretrain, JobStatus.FAILED)
    reconcile_dependencies()
    job = database.job(finetune)
    assert (job.status, job.status_reason) == (JobStatus.CANCELLED, DEPENDENCY_FAILED)
    assert job.message is not None and job.message.startswith(
        f"job {pretrain}, which it depends on, ended failed"
    )
    assert database.job(finetune).dependants_due, "its own end marks its dependants due"
    reconcile_dependencies()
    job = database.job(evaluate)
    assert (job.status, job.status_reason) == (JobStatus.CANCELLED, DEPENDENCY_FAILED)
    assert f"job {finetune}, which it depends on, ended cancelled" in (job.message or "")
    assert rows() == 0 and doorbell.rung == []
    # The other dependency's end finds nothing waiting for it.
    end(other, JobStatus.SUCCEEDED)
    assert reconcile_dependencies() == [other]
    assert database.job(finetune).status == JobStatus.CANCELLED


def test_only_a_job_with_dependants_is_marked_due_when_it_ends(database: WorkerDb) -> None:
    alone = database.add_job()
    end(alone, JobStatus.SUCCEEDED)
    assert not database.job(alone).dependants_due
    assert reconcile_dependencies() == []


def test_a_dependency_that_ended_before_the_submission_committed_is_settled(
    database: WorkerDb, doorbell: Doorbell
) -> None:
    parent = database.add_job()
    end(parent, JobStatus.SUCCEEDED)  # and settled, with no dependant yet, before the submission commits
    waiting = dependant(database, parent)
    assert reconcile_dependencies() == [], "nothing marked it due after the commit yet"
    catch_ended([parent])
    assert reconcile_dependencies() == [parent]
    assert (database.job(waiting).waiting_on, doorbell.rung) == (0, [waiting])

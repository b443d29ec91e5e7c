"""A spec's depends_on: the job waits queued, passed over by placement, until every job it depends on has
succeeded, and is cancelled (dependency_failed) as soon as one of them ends otherwise.

Submission records the dependencies not met yet as rows, their count as the job's waiting_on, and marks each
of those jobs has_dependants. A job's end only records: the transition's own UPDATE sets dependants_due from
has_dependants (core/transitions.py). Every worker's reconciler (worker/reconcilers.py) then settles each due
job's dependants here, in one short write per ended job, outside the change that ended it; a repeated or
concurrent pass finds nothing left to do."""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from core.db import session_scope
from core.doorbell import ring_soon
from core.due import settle_due
from core.models import Job, JobDependency
from core.states import TERMINAL, JobStatus
from core.transitions import move

WAITING_FOR_JOBS = "waiting_for_jobs"
DEPENDENCY_FAILED = "dependency_failed"
DUE_PER_PASS = 100


def jobs_text(ids: list[int]) -> str:
    """ "job 3" or "jobs 3, 4"."""
    return ("job " if len(ids) == 1 else "jobs ") + ", ".join(map(str, ids))


def waiting_message(ids: list[int]) -> str:
    return f"waiting for {jobs_text(ids)} to succeed (depends_on)"


def record_dependencies(session: Session, job_id: int, unmet: list[int]) -> None:
    """In the submission's transaction, once the job has its id: it waits for `unmet`, the jobs of its
    depends_on that have not ended yet."""
    if not unmet:
        return
    waiting = {"waiting_on": len(unmet), "status_reason": WAITING_FOR_JOBS, "message": waiting_message(unmet)}
    session.execute(update(Job).where(Job.id == job_id).values(waiting))
    session.execute(insert(JobDependency), [{"job_id": job_id, "depends_on_id": parent} for parent in unmet])
    session.execute(update(Job).where(Job.id.in_(unmet)).values(has_dependants=True))


def catch_ended(unmet: list[int]) -> None:
    """After the submission has committed. A job that ended between the submission's look at it and the
    commit was settled, if at all, before its new dependant's row existed: marked due again, the next pass
    settles that row."""
    if unmet:
        with session_scope() as session:
            session.execute(
                update(Job)
                .where(Job.id.in_(unmet), Job.status.in_(TERMINAL), Job.has_dependants)
                .values(dependants_due=True)
            )


def settle_dependants(parent_id: int) -> list[int]:
    """Releases (one fewer waiting_on) or cancels the dependants of job `parent_id`, which has ended; the
    dependants that may start now, each rung for."""
    released: list[int] = []
    with session_scope() as session:
        # The write first: it holds SQLite's writer (and PostgreSQL's row) before the read, so a submission
        # that adds a dependant meanwhile marks the job due again after this commits, never before.
        taken = session.execute(
            update(Job).where(Job.id == parent_id, Job.dependants_due).values(dependants_due=False)
        )
        if taken.rowcount != 1:  # type: ignore[attr-defined]
            return []
        status = JobStatus(session.scalar(select(Job.status).where(Job.id == parent_id)))
        dependants = list(
            session.scalars(
                select(JobDependency.job_id)
                .where(JobDependency.depends_on_id == parent_id)
                .order_by(JobDependency.job_id)
            )
        )
        session.execute(
            delete(JobDependency).where(
                JobDependency.depends_on_id == parent_id, JobDependency.job_id.in_(dependants)
            )
        )
        for job_id in dependants:
            if status is not JobStatus.SUCCEEDED:
                _cancel(session, job_id, parent_id, status)
            elif _release(session, job_id):
                released.append(job_id)
    for job_id in released:
        ring_soon(job_id)
    return released


def _release(session: Session, job_id: int) -> bool:
    """One dependency of `job_id` met; whether it was the last of a job still queued."""
    session.execute(update(Job).where(Job.id == job_id).values(waiting_on=Job.waiting_on - 1))
    left = list(
        session.scalars(
            select(JobDependency.depends_on_id)
            .where(JobDependency.job_id == job_id)
            .order_by(JobDependency.depends_on_id)
        )
    )
    message = waiting_message(left) if left else "its dependencies succeeded; waiting for a worker"
    shown = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.QUEUED)
        .values(status_reason=WAITING_FOR_JOBS if left else None, message=message)
    )
    return not left and shown.rowcount == 1  # type: ignore[attr-defined]


def _cancel(session: Session, job_id: int, parent_id: int, status: JobStatus) -> None:
    message = (
        f"job {parent_id}, which it depends on, ended {status}; retry job {parent_id} and submit this "
        "spec again with depends_on naming the retry"
    )
    move(session, job_id, JobStatus.QUEUED, JobStatus.CANCELLED, reason=DEPENDENCY_FAILED, message=message)
    # Its other dependencies no longer matter: their ends would find it cancelled.
    session.execute(delete(JobDependency).where(JobDependency.job_id == job_id))


def reconcile_dependencies() -> list[int]:
    """One reconciler pass: settle the dependants of each job marked dependants_due. Returns those jobs."""
    failing = "job {}: settling its dependants failed"
    return settle_due(Job.id, Job.dependants_due, settle_dependants, DUE_PER_PASS, failing)

"""A job's ranks' stacks: a capture asked for is only recorded here (job_stacks.requested_at); the worker
that runs the job takes it at its next look (worker/attempts/stack_capture.py) and stores it as the latest."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.schemas import RankStack, StacksPublic
from app.services.errors import DomainError, JobStateConflict
from core.models import Job, JobStacks, utcnow
from core.states import JobStatus

# Where the worker looks at the job's row each tick, and its ranks can answer a signal.
CAPTURED_IN = (JobStatus.STARTING, JobStatus.RUNNING)


class StacksNotFound(DomainError):
    def __init__(self, job: Job, asked: bool) -> None:
        fix = (
            "one is asked for: its worker takes it within a few seconds while the job runs; ask again then"
            if asked
            else f"ask for one while it runs (POST /v1/jobs/{job.id}/stacks, `trainyard stacks {job.id}`), "
            "or wait: a stalled job's are captured before it is stopped"
        )
        super().__init__(f"job {job.id} has no stacks captured yet; {fix}")


def ask_for_stacks(session: Session, job: Job) -> None:
    """Record that a capture is wanted; refused for a job that does not run, which has no ranks to ask."""
    if job.status not in CAPTURED_IN:
        fix = "stacks are captured from a running job; GET /v1/jobs/{id}/stacks shows the latest one"
        raise JobStateConflict(job.id, JobStatus(job.status), fix.replace("{id}", str(job.id)))
    asked = update(JobStacks).where(JobStacks.job_id == job.id).values(requested_at=utcnow())
    if session.execute(asked).rowcount != 1:  # type: ignore[attr-defined]
        session.add(JobStacks(job_id=job.id, requested_at=utcnow(), ranks=[], collectives=[]))
    try:
        session.commit()
    except IntegrityError:  # another request made the row meanwhile: say it there
        session.rollback()
        session.execute(asked)
        session.commit()


def latest_stacks(session: Session, job: Job) -> StacksPublic:
    row = session.get(JobStacks, job.id)
    if row is None or row.captured_at is None:
        raise StacksNotFound(job, row is not None)
    return StacksPublic(
        captured_at=row.captured_at,
        reason=row.reason,
        ranks=[RankStack.model_validate(rank) for rank in row.ranks],
        collectives=row.collectives,
        message=row.message,
        requested_at=row.requested_at,
    )

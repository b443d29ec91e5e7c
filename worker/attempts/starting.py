"""Starting an attempt, whichever executor runs it: queued -> starting as the job's next attempt, owned by
this worker, with when it last entered the queue among its start-up marks. The local executor does it once
it has placed the job, the Slurm executor once Slurm runs it."""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.config import get_settings
from core.models import Job, JobEvent, as_utc, utcnow
from core.states import JobStatus
from core.transitions import move
from jobspec.startup import Mark
from worker.tail import add_marks


def worker_id() -> str:
    return f"{get_settings().hostname}:{os.getpid()}"


def queued_mark(session: Session, job_id: int) -> dict[Mark, float]:
    """When the job last entered the queue (submitted, requeued, retried); none for a row made otherwise."""
    entered = select(func.max(JobEvent.at)).where(
        JobEvent.job_id == job_id, JobEvent.to_status == JobStatus.QUEUED
    )
    at = session.scalar(entered)
    return {} if at is None else {Mark.QUEUED: as_utc(at).timestamp()}


def begin_attempt(
    session: Session, job_id: int, message: str, host: str | None, now_marks: tuple[Mark, ...], **values: Any
) -> Job | None:
    """queued -> starting as the next attempt on `host`, the `now_marks` stamped now and `values` (the
    executor's own columns) written with the move; the job as it now is, or None if it left the queue
    meanwhile (a cancel, another worker's claim)."""
    now = utcnow()
    if not move(
        session,
        job_id,
        JobStatus.QUEUED,
        JobStatus.STARTING,
        message=message,
        attempt=Job.attempt + 1,
        host=host,
        worker_id=worker_id(),
        started_at=now,
        heartbeat_at=now,
        running_at=None,
        **values,
    ):
        return None
    job = session.get_one(Job, job_id)  # as move() read it back: the new attempt
    add_marks(job, {**queued_mark(session, job_id), **dict.fromkeys(now_marks, now.timestamp())})
    return job

"""limits.max_pending_s, whichever executor the job waits for: a queued job that waited past it fails, with
what it was waiting for (Trainyard's placement or Slurm's reason) in its message."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select

from core.clock import as_utc
from core.db import session_scope
from core.models import Job, JobEvent
from core.states import JobStatus
from core.transitions import move


def fail_pending_timeouts(now: datetime) -> list[int]:
    """Fail queued jobs that waited past spec.limits.max_pending_s since they last became queued; the jobs
    failed."""
    requeued_at = (
        select(JobEvent.job_id, func.max(JobEvent.at).label("at"))
        .where(JobEvent.to_status == JobStatus.QUEUED)
        .group_by(JobEvent.job_id)
        .subquery()
    )
    failed = []
    with session_scope() as session:
        rows = session.execute(
            select(Job.id, Job.spec, Job.created_at, Job.message, requeued_at.c.at)
            .outerjoin(requeued_at, requeued_at.c.job_id == Job.id)
            .where(Job.status == JobStatus.QUEUED)
        ).all()
        for job_id, spec, created_at, last_message, requeued in rows:
            limit = (spec.get("limits") or {}).get("max_pending_s")
            since = max(as_utc(created_at), as_utc(requeued)) if requeued else as_utc(created_at)
            if limit is None or now - since <= timedelta(seconds=limit):
                continue
            message = f"waited in the queue past limits.max_pending_s={limit}"
            if last_message:
                message += f" ({last_message})"
            if move(
                session, job_id, JobStatus.QUEUED, JobStatus.FAILED, reason="pending_timeout", message=message
            ):
                failed.append(job_id)
    return failed

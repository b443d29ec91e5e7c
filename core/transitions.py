"""Compare-and-set state changes: the only way a job's status moves, each one recorded in job_events."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from core.integrations.webhook_outbox import record_deliveries
from core.models import Job, JobEvent, utcnow
from core.states import ALLOWED, JobStatus
from core.sweeps.told import trial_ended


class InvalidTransition(Exception):
    def __init__(self, from_status: JobStatus, to_status: JobStatus) -> None:
        super().__init__(f"a job cannot go from {from_status} to {to_status}")


def move(
    session: Session,
    job_id: int,
    from_status: JobStatus,
    to_status: JobStatus,
    *,
    reason: str | None = None,
    message: str | None = None,
    **fields: Any,
) -> bool:
    """Set status to `to_status` only if it is still `from_status`; True when this call made the change.

    The caller commits. A False means someone else moved the job first (a cancel, a second delivery).
    """
    if to_status not in ALLOWED[from_status]:
        raise InvalidTransition(from_status, to_status)
    values: dict[str, Any] = {"status": to_status, "status_reason": reason, **fields}
    if message is not None:
        values["message"] = message
    if to_status.is_terminal:
        values.setdefault("finished_at", utcnow())
        # Its dependants are released or cancelled after the commit (core/dependencies.py); read in the
        # same UPDATE, so a job without any costs nothing more.
        values["dependants_due"] = Job.has_dependants
    result = session.execute(update(Job).where(Job.id == job_id, Job.status == from_status).values(**values))
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    attempt = session.get(Job, job_id, populate_existing=True)
    session.add(
        JobEvent(
            job_id=job_id,
            from_status=from_status,
            to_status=to_status,
            reason=reason,
            message=message,
            attempt=attempt.attempt if attempt else 0,
        )
    )
    if attempt is not None:  # the webhooks' outbox, committed with the change by the caller
        record_deliveries(session, attempt, to_status)
    if attempt is not None and to_status.is_terminal:  # a sweep's trial: told, and its successor asked for
        trial_ended(session, attempt)
    return True


def move_from_any(
    session: Session,
    job_id: int,
    from_statuses: list[JobStatus],
    to_status: JobStatus,
    **kwargs: Any,
) -> JobStatus | None:
    """Try each from-state in turn; returns the one the job was in, or None if it was in none of them."""
    for from_status in from_statuses:
        if move(session, job_id, from_status, to_status, **kwargs):
            return from_status
    return None

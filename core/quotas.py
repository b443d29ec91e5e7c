"""What counts against a user's quotas: their unfinished jobs, however they were made (a submission, a retry,
a sweep's trial), and the GPUs those ask for. The API refuses a job past them (app/services/quotas.py); a
sweep's top-up makes only the trials they leave room for (core/sweeps/asks.py), in the API or the worker.

The figures are kept per owner in owner_unfinished by triggers on the jobs table (core/models.py
OwnerUnfinished), whoever changes a job: a submission reads one row, where a count over the owner's
unfinished jobs grew with their queue."""

from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from core.config import Settings
from core.models import Base, OwnerUnfinished

OWNER_UNFINISHED = Base.metadata.tables[OwnerUnfinished.__tablename__]
_UNFINISHED_OF = select(OWNER_UNFINISHED.c.jobs, OWNER_UNFINISHED.c.gpus).where(
    OWNER_UNFINISHED.c.owner == bindparam("owner")
)


def unfinished(session: Session, owner: str) -> tuple[int, int]:
    """`owner`'s unfinished jobs, and the GPUs they ask for."""
    row = session.connection().execute(_UNFINISHED_OF, {"owner": owner}).one_or_none()
    return (0, 0) if row is None else (row.jobs, row.gpus)


def job_room(session: Session, settings: Settings, owner: str) -> int:
    """How many more unfinished jobs `owner` may have (TRAINYARD_QUOTA_MAX_JOBS); 0 when none."""
    return max(0, settings.quota_max_jobs - unfinished(session, owner)[0])

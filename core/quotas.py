"""What counts against a user's quotas: their unfinished jobs, however they were made (a submission, a retry,
a sweep's trial), and the GPUs those ask for. The API refuses a job past them (app/services/quotas.py); a
sweep's top-up makes only the trials they leave room for (core/sweeps/asks.py), in the API or the worker."""

from __future__ import annotations

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from core.config import Settings
from core.models import Base, Job
from core.states import TERMINAL

_JOBS = Base.metadata.tables[Job.__tablename__]
# Built once on the table's columns: a statement rebuilt per submission recomputes its cache key every time.
_UNFINISHED = (_JOBS.c.owner == bindparam("owner"), _JOBS.c.status.not_in(TERMINAL))
_UNFINISHED_JOBS = select(func.count()).where(*_UNFINISHED)
_UNFINISHED_GPUS = select(func.coalesce(func.sum(_JOBS.c.total_gpus), 0)).where(*_UNFINISHED)


def unfinished_jobs(session: Session, owner: str) -> int:
    return int(session.execute(_UNFINISHED_JOBS, {"owner": owner}).scalar_one())


def unfinished_gpus(session: Session, owner: str) -> int:
    """The GPUs `owner`'s unfinished jobs ask for, summed from the stored column by the index
    ix_jobs_owner_status_gpus rather than by parsing each job's plan, whose cost grows with the queue."""
    return int(session.execute(_UNFINISHED_GPUS, {"owner": owner}).scalar_one())


def job_room(session: Session, settings: Settings, owner: str) -> int:
    """How many more unfinished jobs `owner` may have (TRAINYARD_QUOTA_MAX_JOBS); 0 when none."""
    return max(0, settings.quota_max_jobs - unfinished_jobs(session, owner))

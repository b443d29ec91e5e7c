"""Per-user quotas on unfinished jobs and the GPUs they ask for, checked when a job is submitted."""

from __future__ import annotations

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from app.services.errors import QuotaExceeded
from core.config import Settings
from core.models import Base, Job
from core.states import TERMINAL
from jobspec.plan import Plan

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


def check_quota(session: Session, settings: Settings, owner: str, plan: Plan) -> None:
    """Refuse a job that would take `owner` past quota_max_jobs or quota_max_gpus. A job that asks for no
    GPUs takes nobody past the GPU quota, so its check skips the sum of the GPUs asked for.

    Two submissions at the same instant can both pass (the check is a read); the overshoot is bounded by the
    number of concurrent requests, which is acceptable for a fairness limit that guards no invariant.
    """
    jobs = unfinished_jobs(session, owner)
    retry = settings.quota_retry_after_s
    if jobs + 1 > settings.quota_max_jobs:
        raise QuotaExceeded(
            f"user {owner} already has {jobs} unfinished jobs, the most allowed "
            f"(TRAINYARD_QUOTA_MAX_JOBS={settings.quota_max_jobs}); wait for one to finish or cancel one",
            retry,
        )
    if not plan.total_gpus:
        return
    gpus = unfinished_gpus(session, owner)
    if gpus + plan.total_gpus > settings.quota_max_gpus:
        raise QuotaExceeded(
            f"user {owner}'s unfinished jobs ask for {gpus} GPUs; {plan.total_gpus} more would pass "
            f"TRAINYARD_QUOTA_MAX_GPUS={settings.quota_max_gpus}; wait for a job to finish or cancel one",
            retry,
        )

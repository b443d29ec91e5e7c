"""Per-user quotas on unfinished jobs and the GPUs they ask for, checked when a job is submitted."""

from __future__ import annotations

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.models import Base, Job
from app.services.errors import QuotaExceeded
from app.states import TERMINAL
from trainers.plan import Plan

_JOBS = Base.metadata.tables[Job.__tablename__]
# Built once on the table's columns: a statement rebuilt per submission recomputes its cache key every time.
# GPUs per host times hosts; plans stored before multi-host jobs have no nnodes and span one host.
_GPUS_ASKED = _JOBS.c.plan["num_gpus"].as_integer() * func.coalesce(_JOBS.c.plan["nnodes"].as_integer(), 1)
_UNFINISHED_USAGE = select(func.count(), func.coalesce(func.sum(_GPUS_ASKED), 0)).where(
    _JOBS.c.owner == bindparam("owner"), _JOBS.c.status.not_in(TERMINAL)
)


def unfinished_usage(session: Session, owner: str) -> tuple[int, int]:
    """Unfinished jobs and the GPUs they ask for, counted by the database: this runs on every submission,
    and loading every queued plan made submissions slow down as the queue grew."""
    jobs, asked = session.execute(_UNFINISHED_USAGE, {"owner": owner}).one()
    return int(jobs), int(asked)


def check_quota(session: Session, settings: Settings, owner: str, plan: Plan) -> None:
    """Refuse a job that would take `owner` past quota_max_jobs or quota_max_gpus.

    Two submissions at the same instant can both pass (the check is a read); the overshoot is bounded by the
    number of concurrent requests, which is acceptable for a fairness limit that guards no invariant.
    """
    jobs, gpus = unfinished_usage(session, owner)
    retry = settings.quota_retry_after_s
    if jobs + 1 > settings.quota_max_jobs:
        raise QuotaExceeded(
            f"user {owner} already has {jobs} unfinished jobs, the most allowed "
            f"(TRAINYARD_QUOTA_MAX_JOBS={settings.quota_max_jobs}); wait for one to finish or cancel one",
            retry,
        )
    if gpus + plan.total_gpus > settings.quota_max_gpus:
        raise QuotaExceeded(
            f"user {owner}'s unfinished jobs ask for {gpus} GPUs; {plan.total_gpus} more would pass "
            f"TRAINYARD_QUOTA_MAX_GPUS={settings.quota_max_gpus}; wait for a job to finish or cancel one",
            retry,
        )

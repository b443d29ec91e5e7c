"""Per-user quotas on unfinished jobs and the GPUs they ask for, checked when a job or a sweep is submitted.
What counts is core/quotas.py's, which a sweep's top-up reads too."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.services.errors import QuotaExceeded
from core.config import Settings
from core.quotas import unfinished
from jobspec.plan import Plan


def check_job_room(session: Session, settings: Settings, owner: str) -> None:
    """Refuse one more unfinished job for `owner` past quota_max_jobs."""
    _check_jobs(settings, owner, unfinished(session, owner)[0])


def _check_jobs(settings: Settings, owner: str, jobs: int) -> None:
    if jobs + 1 > settings.quota_max_jobs:
        raise QuotaExceeded(
            f"user {owner} already has {jobs} unfinished jobs, the most allowed "
            f"(TRAINYARD_QUOTA_MAX_JOBS={settings.quota_max_jobs}); wait for one to finish or cancel one",
            settings.quota_retry_after_s,
        )


def check_quota(session: Session, settings: Settings, owner: str, plan: Plan) -> None:
    """Refuse a job that would take `owner` past quota_max_jobs or quota_max_gpus. A job that asks for no
    GPUs takes nobody past the GPU quota.

    Two submissions at the same instant can both pass (the check is a read); the overshoot is bounded by the
    number of concurrent requests, which is acceptable for a fairness limit that guards no invariant.
    """
    jobs, gpus = unfinished(session, owner)
    _check_jobs(settings, owner, jobs)
    if plan.total_gpus and gpus + plan.total_gpus > settings.quota_max_gpus:
        raise QuotaExceeded(
            f"user {owner}'s unfinished jobs ask for {gpus} GPUs; {plan.total_gpus} more would pass "
            f"TRAINYARD_QUOTA_MAX_GPUS={settings.quota_max_gpus}; wait for a job to finish or cancel one",
            settings.quota_retry_after_s,
        )

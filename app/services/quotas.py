"""Per-user quotas on unfinished jobs and the GPUs they ask for, checked when a job or a sweep is submitted.
What counts is core/quotas.py's, which a sweep's top-up reads too."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.services.errors import QuotaExceeded
from core.config import Settings
from core.quotas import unfinished_gpus, unfinished_jobs
from jobspec.plan import Plan


def check_job_room(session: Session, settings: Settings, owner: str) -> None:
    """Refuse one more unfinished job for `owner` past quota_max_jobs."""
    jobs = unfinished_jobs(session, owner)
    if jobs + 1 > settings.quota_max_jobs:
        raise QuotaExceeded(
            f"user {owner} already has {jobs} unfinished jobs, the most allowed "
            f"(TRAINYARD_QUOTA_MAX_JOBS={settings.quota_max_jobs}); wait for one to finish or cancel one",
            settings.quota_retry_after_s,
        )


def check_quota(session: Session, settings: Settings, owner: str, plan: Plan) -> None:
    """Refuse a job that would take `owner` past quota_max_jobs or quota_max_gpus. A job that asks for no
    GPUs takes nobody past the GPU quota, so its check skips the sum of the GPUs asked for.

    Two submissions at the same instant can both pass (the check is a read); the overshoot is bounded by the
    number of concurrent requests, which is acceptable for a fairness limit that guards no invariant.
    """
    check_job_room(session, settings, owner)
    if not plan.total_gpus:
        return
    gpus = unfinished_gpus(session, owner)
    if gpus + plan.total_gpus > settings.quota_max_gpus:
        raise QuotaExceeded(
            f"user {owner}'s unfinished jobs ask for {gpus} GPUs; {plan.total_gpus} more would pass "
            f"TRAINYARD_QUOTA_MAX_GPUS={settings.quota_max_gpus}; wait for a job to finish or cancel one",
            settings.quota_retry_after_s,
        )

"""Per-user quotas on unfinished jobs and the GPUs they ask for, checked when a job is submitted."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.models import Job
from app.services.errors import QuotaExceeded
from app.states import TERMINAL
from trainers.plan import Plan


def unfinished_plans(session: Session, owner: str) -> list[Plan]:
    rows = session.scalars(select(Job.plan).where(Job.owner == owner, Job.status.not_in(TERMINAL)))
    return [Plan.model_validate(plan) for plan in rows]


def check_quota(session: Session, settings: Settings, owner: str, plan: Plan) -> None:
    """Refuse a job that would take `owner` past quota_max_jobs or quota_max_gpus.

    Two submissions at the same instant can both pass (the check is a read); the overshoot is bounded by the
    number of concurrent requests, which is acceptable for a fairness limit that guards no invariant.
    """
    plans = unfinished_plans(session, owner)
    retry = settings.quota_retry_after_s
    if len(plans) + 1 > settings.quota_max_jobs:
        raise QuotaExceeded(
            f"user {owner} already has {len(plans)} unfinished jobs, the most allowed "
            f"(TRAINYARD_QUOTA_MAX_JOBS={settings.quota_max_jobs}); wait for one to finish or cancel one",
            retry,
        )
    gpus = sum(p.num_gpus for p in plans)
    if gpus + plan.num_gpus > settings.quota_max_gpus:
        raise QuotaExceeded(
            f"user {owner}'s unfinished jobs ask for {gpus} GPUs; {plan.num_gpus} more would pass "
            f"TRAINYARD_QUOTA_MAX_GPUS={settings.quota_max_gpus}; wait for a job to finish or cancel one",
            retry,
        )

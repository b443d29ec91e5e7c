"""The queue: queued jobs in the order workers start them, and why each one is still waiting."""

from __future__ import annotations

import itertools

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.schemas import QueueEntry, QueuePublic
from app.services.usage import explain_share, read_use
from core.config import get_settings
from core.hosts import cores_text
from core.models import Job
from core.queue_order import START_ORDER
from core.states import JobStatus
from jobspec.plan import Plan

NOT_YET_SEEN = "waiting for a worker to take it"


def wanted_devices(plan: Plan) -> str:
    """What the job waits for, as a person would say it: 'GPUs [1, 2]', '2 GPUs', '2 CPU cores' (as the
    scheduler counts them: hogwild's workers), and for a multi-host job '2 hosts x 4 GPUs'."""
    hosts = f"{plan.nnodes} hosts x " if plan.nnodes > 1 else ""
    if plan.gpus:
        return hosts + "GPUs [" + ", ".join(str(gpu) for gpu in plan.gpus) + "]"
    if plan.num_gpus:
        return hosts + f"{plan.num_gpus} GPU" + ("s" if plan.num_gpus > 1 else "")
    return hosts + cores_text(plan.cpu_cores)


def list_queue(session: Session, owner: str | None = None) -> QueuePublic:
    """Positions count every queued job, so a caller who sees only their own still learns how many are
    ahead; `owner` None lists all."""
    jobs = list(session.scalars(select(Job).where(Job.status == JobStatus.QUEUED).order_by(*START_ORDER)))
    entries = [
        QueueEntry(
            position=position,
            job_id=job.id,
            name=job.name,
            owner=job.owner,
            priority=job.priority,
            wants=wanted_devices(Plan.model_validate(job.plan)),
            status_reason=job.status_reason,
            reason=job.message or NOT_YET_SEEN,
            created_at=job.created_at,
        )
        for position, job in enumerate(jobs, start=1)
        if owner is None or job.owner == owner
    ]
    return QueuePublic(data=entries, fair_share=_fair_share(session, jobs, owner))


def _fair_share(session: Session, jobs: list[Job], owner: str | None) -> str | None:
    """Why users' jobs of one priority start in the order they do, naming the users that fair share orders
    (only the caller, unless `owner` is None: another user's use is theirs and the admins' to see)."""
    contested = {
        priority
        for priority, group in itertools.groupby(jobs, key=lambda job: job.priority)
        if len({job.owner for job in group}) > 1
    }
    ordered = list(dict.fromkeys(job.owner for job in jobs if job.priority in contested))
    named = [user for user in ordered if owner is None or user == owner]
    if not named:
        return None
    settings = get_settings()
    return explain_share(named, read_use(session, settings, ordered), settings)

"""The queue: queued jobs in the order workers start them, why each one is still waiting, and when it would
start if the jobs ahead run as long as forecast (queue_eta.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from app.schemas import QueueEntry, QueuePublic
from app.services.queue_eta import BEYOND, DEPTH, Waiting, host_slots, play
from app.services.queue_index import (
    QueuedJob,
    first_to_start,
    in_start_order,
    owners_by_priority,
    queue_positions,
)
from app.services.usage import explain_share, read_use
from core.config import Settings, get_settings
from core.hosts import cores_text
from core.models import Job, utcnow
from core.states import JobStatus
from core.usage import Use
from jobspec.plan import Plan

NOT_YET_SEEN = "waiting for a worker to take it"
LIMIT = 200  # entries a GET /v1/queue shows by default
# What an entry is shown from, and what the play needs: the columns alone, never the spec or the metrics.
_ENTRY = [
    Job.id,
    Job.name,
    Job.owner,
    Job.priority,
    Job.status_reason,
    Job.message,
    Job.created_at,
    Job.plan,
    Job.waiting_on,
]


def wanted_devices(plan: Plan) -> str:
    """What the job waits for, as a person would say it: 'GPUs [1, 2]', '2 GPUs', '2 CPU cores' (as the
    scheduler counts them: hogwild's workers), and for a multi-host job '2 hosts x 4 GPUs'."""
    hosts = f"{plan.nnodes} hosts x " if plan.nnodes > 1 else ""
    if plan.gpus:
        return hosts + "GPUs [" + ", ".join(str(gpu) for gpu in plan.gpus) + "]"
    if plan.num_gpus:
        return hosts + f"{plan.num_gpus} GPU" + ("s" if plan.num_gpus > 1 else "")
    return hosts + cores_text(plan.cpu_cores)


def _first_shown(session: Session, owner: str | None, limit: int) -> list[Row[Any]]:
    """The rows of the first `limit` queued jobs in start order (of `owner`'s alone unless it is None): those
    in line from the API's index, those waiting for their depends_on (few: each owner's are within their job
    quota) at the places they would take. No sort of the whole queue, whose cost grew with its depth."""
    # By the partial index ix_jobs_waiting alone: with the status in the query, SQLite would read every
    # queued job by ix_jobs_status to find them.
    waiting = select(Job.id, Job.priority, Job.owner, Job.status).where(Job.waiting_on > 0)
    held = [
        QueuedJob(row.id, row.priority, row.owner)
        for row in session.execute(waiting)
        if row.status == JobStatus.QUEUED and owner in (None, row.owner)
    ]
    first = first_to_start(session, limit, owner)
    ids = [job.id for job in (in_start_order(session, first + held)[:limit] if held else first)]
    # A job that left the queue since the index was read is not shown.
    rows = session.execute(select(*_ENTRY).where(Job.id.in_(ids), Job.status == JobStatus.QUEUED))
    by_id = {row.id: row for row in rows}
    return [by_id[job_id] for job_id in ids if job_id in by_id]


def list_queue(session: Session, owner: str | None = None, limit: int = LIMIT) -> QueuePublic:
    """The first `limit` queued jobs in start order (of `owner`'s alone unless it is None). Positions count
    every queued job that may start (none waiting for its depends_on, which shows the place it would take),
    so a caller who sees only their own still learns how many are ahead. What a request reads is bounded
    whatever the queue's depth: `limit` rows, the plans of the DEPTH played forward."""
    jobs = _first_shown(session, owner, limit)
    positions = queue_positions(session, [QueuedJob(job.id, job.priority, job.owner) for job in jobs])
    plans = {job.id: Plan.model_validate(job.plan) for job in jobs}
    # The first DEPTH jobs that may start are played forward whoever owns them: they are ahead of the
    # caller's. Their order comes from the API's index, their plans from what was read or one more read.
    head = first_to_start(session, DEPTH)
    unread = [job.id for job in head if job.id not in plans]
    if unread:
        rows = session.execute(select(Job.id, Job.plan).where(Job.id.in_(unread)))
        plans.update({row.id: Plan.model_validate(row.plan) for row in rows})
    # A job that left the queue between the two reads is not played; one waiting for its depends_on
    # holds nothing and says so.
    played = [Waiting(job.id, plans[job.id], False) for job in head if job.id in plans]
    played += [Waiting(job.id, plans[job.id], True) for job in jobs if job.waiting_on > 0]
    starts = play(host_slots(session, get_settings(), utcnow()), played)
    entries = [
        QueueEntry(
            position=positions[job.id],
            job_id=job.id,
            name=job.name,
            owner=job.owner,
            priority=job.priority,
            wants=wanted_devices(plans[job.id]),
            status_reason=job.status_reason,
            reason=job.message or NOT_YET_SEEN,
            created_at=job.created_at,
            starts_in_s=starts[job.id].in_s if job.id in starts else None,
            starts_in_note=starts[job.id].note if job.id in starts else BEYOND,
        )
        for job in jobs
    ]
    return QueuePublic(data=entries, fair_share=_fair_share(session, owner, get_settings()))


def _fair_share(session: Session, owner: str | None, settings: Settings) -> str | None:
    """Why users' jobs of one priority start in the order they do, naming the users that fair share orders
    (only the caller, unless `owner` is None: another user's use is theirs and the admins' to see)."""
    contested = [
        (priority, user, oldest)
        for priority, oldest_of in owners_by_priority(session).items()
        if len(oldest_of) > 1
        for user, oldest in oldest_of.items()
    ]
    if not contested:
        return None
    uses = read_use(session, settings, {user for _, user, _ in contested})
    # In the order their jobs start: by priority, then the share that orders them, then their oldest job.
    none = Use(0.0, 0.0)
    in_order = sorted(contested, key=lambda row: (-row[0], uses.get(row[1], none).weighted(settings), row[2]))
    ordered = list(dict.fromkeys(user for _, user, _ in in_order))
    named = [user for user in ordered if owner is None or user == owner]
    if not named:
        return None
    return explain_share(named, uses, settings)

"""Reading jobs, cancelling and deleting them. Submission and retry live in services/submit.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, Text, bindparam, cast, select, update
from sqlalchemy.orm import Session

from app.schemas import JobProgress, JobPublic, as_utc
from app.services.errors import InvalidSpec, JobNotFound, JobStateConflict
from app.services.forecast_accuracy import with_measured
from app.services.keys import Caller
from app.services.queue_index import QUEUE_HEAD, QueuedJob, queue_positions
from app.services.runs import discard_run_dir, put_run_dir_back, set_run_dir_aside
from app.services.shown import shown_plan
from app.timings import job_timings
from core.config import Settings, get_settings
from core.models import Job, JobEvent, utcnow
from core.queue_order import JOBS
from core.states import JobStatus
from core.transitions import move, move_from_any

CANCEL_REASON = "cancelled_by_user"
# A worker or the reaper may move the job between our read and our compare-and-set; a few rounds settle it.
_CANCEL_ROUNDS = 3


def get_job(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id, populate_existing=True)
    if job is None:
        raise JobNotFound(job_id)
    return job


def get_owned_job(session: Session, job_id: int, caller: Caller) -> Job:
    """The job if the caller may see it; another user's job is reported missing, like an absent one."""
    job = get_job(session, job_id)
    if not caller.may_see(job.owner):
        raise JobNotFound(job_id)
    return job


def get_owned_row(session: Session, job_id: int, caller: Caller) -> Row[Any]:
    """What GET /v1/jobs/{id} shows of a job the caller may see, read with SQLAlchemy Core on the session's
    connection: a row with the job's attributes, without the ORM's execution path, identity map and object
    loading, which it does not need."""
    row = session.connection().execute(_SHOWN_ROW, {"job_id": job_id}).one_or_none()
    if row is None or not caller.may_see(row.owner):
        raise JobNotFound(job_id)
    return row


def queue_positions_of(
    session: Session, jobs: Sequence[Job | Row[Any]], head: int | None = None
) -> dict[int, int]:
    """The positions of those of `jobs` that are queued (1 = next to start), from the API's index; `head`
    the queue's newest change where it was read with them (queue_index.py's QUEUE_HEAD)."""
    queued = [QueuedJob(job.id, job.priority, job.owner) for job in jobs if job.status == JobStatus.QUEUED]
    return queue_positions(session, queued, head)


def progress_of(job: Job | Row[Any], now: datetime) -> JobProgress:
    eta_s = None
    step, total = job.progress_step, job.progress_total
    if job.status == JobStatus.RUNNING and job.running_at is not None and step > 0 and total:
        elapsed = (now - as_utc(job.running_at)).total_seconds()
        eta_s = round(max(elapsed, 0.0) / step * max(total - step, 0), 1)
    return JobProgress(step=step, total=total, eta_s=eta_s)


# JobPublic's fields that are the job's own columns; the others are worked out when it is shown.
_COLUMNS = JobPublic.model_fields.keys() - {"queue_position", "progress", "timings"}
# The columns a job is shown from: its own, and those its progress and queue position are worked out from.
# The plan as its stored JSON text: shown_plan rewrites the server's folders in it, then parses it once.
# A submission's last write returns them (app/services/submit.py), so its answer reads nothing again.
SHOWN_COLUMNS = [
    cast(JOBS.c.plan, Text).label("plan") if name == "plan" else JOBS.c[name]
    for name in sorted(_COLUMNS | {"progress_step", "progress_total", "timings"})
]
# Built once: SQLAlchemy then finds its compiled form without building the statement and its cache key anew.
# With the queue's newest change, read in the same statement: the queue index, already at it, then reads
# nothing more for a queued job's position.
_SHOWN_ROW = select(*SHOWN_COLUMNS, QUEUE_HEAD.label("queue_head")).where(JOBS.c.id == bindparam("job_id"))


def _public(job: Job | Row[Any], position: int | None, now: datetime) -> JobPublic:
    shown = {name: getattr(job, name) for name in _COLUMNS}
    shown.update(
        queue_position=position,
        progress=progress_of(job, now),
        # The forecast's measured figures from the metrics read with the row: no query of their own.
        plan=with_measured(shown_plan(job.plan, get_settings()), job.latest_metrics or {}),
        timings=job_timings(job.timings),
    )
    return JobPublic.model_validate(shown)


def public_job(session: Session, job: Job | Row[Any], queue_head: int | None = None) -> JobPublic:
    """The job as the API shows it: its columns, its place in the queue, its progress and ETA; `queue_head`
    where the queue's newest change was read with it (get_owned_row's)."""
    return _public(job, queue_positions_of(session, [job], queue_head).get(job.id), utcnow())


def list_jobs(
    session: Session, caller: Caller, status: JobStatus | None, cursor: int | None, limit: int
) -> tuple[list[JobPublic], int | None]:
    """Newest first; the cursor is the last id of the previous page, so new submissions never shift pages.
    Only the caller's own jobs, unless the caller is an admin."""
    # The shown columns as plain rows, as a single job is read: the ORM's objects would add nothing here.
    query = select(*SHOWN_COLUMNS).order_by(JOBS.c.id.desc()).limit(limit + 1)
    if not caller.is_admin:
        query = query.where(JOBS.c.owner == caller.user)
    if status is not None:
        query = query.where(JOBS.c.status == status)
    if cursor is not None:
        query = query.where(JOBS.c.id < cursor)
    rows = session.execute(query).all()
    positions, now = queue_positions_of(session, rows[:limit]), utcnow()
    page = [_public(job, positions.get(job.id), now) for job in rows[:limit]]
    return page, page[-1].id if len(rows) > limit else None


def list_events(session: Session, job_id: int) -> list[JobEvent]:
    return list(session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))


def cancel_job(session: Session, job_id: int) -> Job:
    """A queued job is cancelled at once; a dispatched one goes to cancelling and its worker, which watches
    the row, kills it. Both are compare-and-sets, so a cancel racing a dispatch wins or sees it lost."""
    changes = {"reason": CANCEL_REASON, "message": "cancelled at the user's request"}
    for _ in range(_CANCEL_ROUNDS):
        job = get_job(session, job_id)
        status = JobStatus(job.status)
        if status is JobStatus.CANCELLING:
            return job
        if status.is_terminal:
            raise JobStateConflict(job_id, status, "it already finished, so there is nothing to cancel")
        moved = move(session, job_id, JobStatus.QUEUED, JobStatus.CANCELLED, **changes) or move_from_any(
            session,
            job_id,
            [JobStatus.STARTING, JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.PREEMPTING],
            JobStatus.CANCELLING,
            **changes,
        )
        if moved:
            session.commit()
            return get_job(session, job_id)
    raise JobStateConflict(job_id, status, "it kept changing state while being cancelled; try again")


def check_priority(settings: Settings, priority: int, caller: Caller) -> None:
    """Only admins may set a priority above the threshold; any higher priority starts first and preempts
    lower ones."""
    if priority > settings.admin_priority_above and not caller.is_admin:
        raise InvalidSpec(
            "priority",
            f"priority {priority} is above {settings.admin_priority_above} (TRAINYARD_ADMIN_PRIORITY_ABOVE), "
            f"which only admins may set; ask for {settings.admin_priority_above} or less, or ask an admin",
        )


def set_priority(session: Session, settings: Settings, job_id: int, priority: int, caller: Caller) -> Job:
    """Only while queued, as a compare-and-set: a job a worker claims meanwhile has started, and its
    priority no longer means anything."""
    check_priority(settings, priority, caller)
    changed = session.execute(
        update(Job).where(Job.id == job_id, Job.status == JobStatus.QUEUED).values(priority=priority)
    )
    if changed.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        status = JobStatus(get_job(session, job_id).status)
        raise JobStateConflict(job_id, status, "priority can only change while a job is queued")
    session.commit()
    return get_job(session, job_id)


def delete_job(session: Session, settings: Settings, job: Job) -> None:
    """Its files are moved aside first, so that a failure keeps the job (and reports it) rather than leaving
    files behind; then the rows of events, metrics, checkpoints and leases go with the job (ON DELETE
    CASCADE), and last the files."""
    job_id = job.id
    status = JobStatus(job.status)
    if not status.is_terminal:
        raise JobStateConflict(
            job_id, status, f"cancel it first (POST /v1/jobs/{job_id}/cancel) and delete it once it has ended"
        )
    moved = set_run_dir_aside(settings, job_id)
    try:
        session.delete(job)
        session.commit()
    except BaseException:
        put_run_dir_back(settings, job_id, moved)
        raise
    discard_run_dir(settings, job_id, moved)

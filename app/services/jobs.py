"""Reading jobs, cancelling and deleting them. Submission and retry live in services/submit.py."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Dialect, Row, bindparam, select, update
from sqlalchemy.orm import Session

from app.core.driver_read import OneRowRead
from app.schemas import JobProgress, JobPublic, as_utc
from app.services.errors import JobNotFound, JobStateConflict
from app.services.keys import Caller
from app.services.queue import JOBS, QUEUE_POSITION
from app.services.runs import remove_run_dir
from core.config import Settings
from core.models import Job, JobEvent, utcnow
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


# What JobPublic shows, and the owner for the visibility check, in one Core query on the table's columns:
# reads are the API's hot path, and ORM entities (and a statement rebuilt per call, whose cache key is
# computed anew each time) cost several times the SQL itself.
_PUBLIC = select(
    *(
        JOBS.c[name]
        for name in (
            "id",
            "name",
            "owner",
            "status",
            "status_reason",
            "message",
            "attempt",
            "priority",
            "created_at",
            "started_at",
            "running_at",
            "finished_at",
            "host",
            "gpu_ids",
            "progress_step",
            "progress_total",
            "latest_metrics",
            "spec",
            "plan",
        )
    ),
    QUEUE_POSITION,
)
# GET /v1/jobs/{id}, which clients poll, reads on the driver's cursor: the same SQL and values, less work.
_PUBLIC_BY_ID = OneRowRead(_PUBLIC.where(JOBS.c.id == bindparam("job_id")))
_OWNER, _STATUS = (_PUBLIC_BY_ID.columns.index(name) for name in ("owner", "status"))
# A row of _PUBLIC's columns: a Row from execute(), or OneRowRead's named tuple of the same fields.
JobRow = Row[*tuple[Any, ...]] | Any


def progress_of(job: JobRow, now: datetime) -> JobProgress:
    eta_s = None
    step, total = job.progress_step, job.progress_total
    if job.status == JobStatus.RUNNING and job.running_at is not None and step > 0 and total:
        elapsed = (now - as_utc(job.running_at)).total_seconds()
        eta_s = round(max(elapsed, 0.0) / step * max(total - step, 0), 1)
    return JobProgress(step=step, total=total, eta_s=eta_s)


def _public(job: JobRow, now: datetime) -> JobPublic:
    return JobPublic(
        id=job.id,
        name=job.name,
        status=JobStatus(job.status),
        status_reason=job.status_reason,
        message=job.message,
        attempt=job.attempt,
        priority=job.priority,
        created_at=job.created_at,
        started_at=job.started_at,
        running_at=job.running_at,
        finished_at=job.finished_at,
        host=job.host,
        gpu_ids=job.gpu_ids,
        queue_position=job.queue_position,
        progress=progress_of(job, now),
        latest_metrics=job.latest_metrics or {},
        spec=job.spec,
        plan=job.plan,
    )


def _owned_row(connection: Connection, job_id: int, caller: Caller) -> tuple[Any, ...]:
    """The job's row as the driver returns it, if the caller may see the job; another user's job is reported
    missing, like an absent one, so ids cannot be probed."""
    found = _PUBLIC_BY_ID.fetch(connection, job_id=job_id)
    if found is None or not caller.may_see(found[_OWNER]):
        raise JobNotFound(job_id)
    return found


def public_job(connection: Connection, job_id: int, caller: Caller) -> JobPublic:
    """The job as the API shows it. Takes a Connection (a Session's is `session.connection()`): the ORM adds
    nothing to one Core row but its cost."""
    return _render(connection.dialect, _owned_row(connection, job_id, caller)).public


@dataclass(frozen=True)
class _Rendered:
    row: Any  # converted: JSON columns decoded, datetimes parsed
    public: JobPublic


def _render(dialect: Dialect, found: tuple[Any, ...]) -> _Rendered:
    row = _PUBLIC_BY_ID.convert(dialect, found)
    return _Rendered(row, _public(row, utcnow()))


def _body(dialect: Dialect, found: tuple[Any, ...]) -> bytes:
    return _render(dialect, found).public.model_dump_json().encode()


@dataclass(frozen=True)
class _RunningBody:
    """A running job's body cut around the value of its progress, the one part that moves with the clock."""

    row: Any
    head: bytes  # up to and including the "progress" key
    tail: bytes

    def at(self, now: datetime) -> bytes:
        return self.head + progress_of(self.row, now).model_dump_json().encode() + self.tail


def _running_body(dialect: Dialect, found: tuple[Any, ...]) -> _RunningBody:
    rendered = _render(dialect, found)
    body = rendered.public.model_dump_json().encode()
    key, value = b'"progress":', rendered.public.progress.model_dump_json().encode()
    # The first match is the job's own field: the fields before it hold no keys (a quote inside a string is
    # escaped), and those after it (metrics, spec, plan), which may, come later in the body.
    start = body.index(key + value) + len(key)
    return _RunningBody(rendered.row, body[:start], body[start + len(value) :])


# Clients poll jobs, so the same rows come back again and again, and rendering one (its JSON columns decoded,
# the model validated and dumped) costs several times what reading it does. Rows are keyed exactly as the
# driver returned them, so a row that changed in any column (its queue position, a running job's progress)
# is another key. A body is a function of its row, except a running job's ETA, which moves with the clock:
# a running job keeps its body cut around its progress, and only that is made again. Bodies are kept as
# bytes, which the garbage collector never walks (1024 of ~2 KB: ~2 MB, with their rows ~5 MB).
_body_again = lru_cache(maxsize=1024)(_body)
_running_body_again = lru_cache(maxsize=128)(_running_body)


def public_job_json(connection: Connection, job_id: int, caller: Caller) -> bytes:
    """public_job(...) as JSON bytes, for GET /v1/jobs/{id}: the same bytes model_dump_json() gives."""
    found = _owned_row(connection, job_id, caller)
    hashable = _hashable(found)
    if found[_STATUS] != JobStatus.RUNNING:
        return (_body_again if hashable else _body)(connection.dialect, found)
    return (_running_body_again if hashable else _running_body)(connection.dialect, found).at(utcnow())


def _hashable(found: tuple[Any, ...]) -> bool:
    try:
        hash(found)
    except TypeError:  # a server database's driver hands JSON columns back decoded, as dicts and lists
        return False
    return True


def list_jobs(
    session: Session, caller: Caller, status: JobStatus | None, cursor: int | None, limit: int
) -> tuple[list[JobPublic], int | None]:
    """Newest first; the cursor is the last id of the previous page, so new submissions never shift pages.
    Only the caller's own jobs, unless the caller is an admin."""
    query = _PUBLIC.order_by(JOBS.c.id.desc()).limit(limit + 1)
    if not caller.is_admin:
        query = query.where(JOBS.c.owner == caller.user)
    if status is not None:
        query = query.where(JOBS.c.status == status)
    if cursor is not None:
        query = query.where(JOBS.c.id < cursor)
    rows = session.execute(query).all()
    now = utcnow()
    page = [_public(row, now) for row in rows[:limit]]
    return page, rows[limit - 1].id if len(rows) > limit else None


def list_events(session: Session, job_id: int) -> list[JobEvent]:
    get_job(session, job_id)
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
            [JobStatus.STARTING, JobStatus.RUNNING, JobStatus.RESTARTING],
            JobStatus.CANCELLING,
            **changes,
        )
        if moved:
            session.commit()
            return get_job(session, job_id)
    raise JobStateConflict(job_id, status, "it kept changing state while being cancelled; try again")


def set_priority(session: Session, job_id: int, priority: int) -> Job:
    """Only while queued, as a compare-and-set: a job a worker claims meanwhile has started, and its
    priority no longer means anything."""
    get_job(session, job_id)
    changed = session.execute(
        update(Job).where(Job.id == job_id, Job.status == JobStatus.QUEUED).values(priority=priority)
    )
    if changed.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        status = JobStatus(get_job(session, job_id).status)
        raise JobStateConflict(job_id, status, "priority can only change while a job is queued")
    session.commit()
    return get_job(session, job_id)


def delete_job(session: Session, settings: Settings, job_id: int) -> None:
    """Rows of events, metrics, checkpoints and leases go with the job (ON DELETE CASCADE), then its files."""
    job = get_job(session, job_id)
    status = JobStatus(job.status)
    if not status.is_terminal:
        raise JobStateConflict(
            job_id, status, f"cancel it first (POST /v1/jobs/{job_id}/cancel) and delete it once it has ended"
        )
    session.delete(job)
    session.commit()
    remove_run_dir(settings, job_id)

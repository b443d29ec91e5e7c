"""The MLflow export's rows, in SQL alone: which jobs become MLflow runs, which one an exporter works on now,
and which metric rows it has not sent yet. The exporter that talks to MLflow is
app/services/integrations/mlflow_exporter.py.

Jobs are found by a cursor over their ids, which leaves the submission path alone: each pass reads the jobs
submitted since the cursor, gives each one that asks for an export its row, and moves the cursor over those
submitted more than SETTLE ago. It stays behind the newest ones because on PostgreSQL a job may commit after
another with a higher id; the jobs read again meanwhile are few, and their rows are made once.

A job's metric rows are sent in step order per name, and `exported_through` keeps the last step sent of each
name, so a point is sent once however often the export stops and starts again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core.clock import as_utc
from core.models import Job, Metric, MlflowCursor, MlflowExport
from jobspec.spec_tracking import MlflowTracking, TrackingSpec

SETTLE = timedelta(minutes=2)  # far longer than a submission's transaction stays open
SCAN_BATCH = 500  # jobs read per pass past the cursor
_CURSOR_ID = 1


def asked_options(spec: dict[str, Any]) -> MlflowTracking | None:
    """A stored spec's tracking.mlflow; None where it asks for none."""
    return TrackingSpec.model_validate(spec.get("tracking", {})).mlflow


def _cursor(session: Session, now: datetime) -> int:
    """Where the last pass left the cursor. The first pass starts after the jobs submitted before it (those
    of the last SETTLE aside), so turning the export on does not send a server's whole history."""
    at = session.scalar(select(MlflowCursor.job_id).where(MlflowCursor.id == _CURSOR_ID))
    if at is not None:
        return at
    settled = select(func.max(Job.id)).where(Job.created_at <= now - SETTLE)
    start = session.scalar(settled) or 0
    try:
        session.add(MlflowCursor(id=_CURSOR_ID, job_id=start))
        session.commit()
    except IntegrityError:  # another exporter's first pass made it
        session.rollback()
    return session.scalar(select(MlflowCursor.job_id).where(MlflowCursor.id == _CURSOR_ID)) or 0


def _settled_prefix(rows: list[Any], before: datetime) -> int | None:
    """The highest id up to which every job read is older than `before`."""
    through = None
    for job_id, _, created_at in rows:
        if as_utc(created_at) > before:
            break
        through = job_id
    return through


def discover(session: Session, all_jobs: bool, now: datetime) -> int:
    """Give each job submitted since the cursor that asks for an export its row; returns how many were
    made. Commits."""
    start = _cursor(session, now)
    query = select(Job.id, Job.spec, Job.created_at).where(Job.id > start).order_by(Job.id).limit(SCAN_BATCH)
    rows = list(session.execute(query))
    wanted = [job_id for job_id, spec, _ in rows if all_jobs or asked_options(spec) is not None]
    made = set(wanted) - set(
        session.scalars(select(MlflowExport.job_id).where(MlflowExport.job_id.in_(wanted)))
    )
    session.add_all(
        MlflowExport(job_id=job_id, token=uuid.uuid4().hex, next_attempt_at=now) for job_id in sorted(made)
    )
    through = _settled_prefix(rows, now - SETTLE)
    if through is not None and through > start:
        session.execute(
            update(MlflowCursor)
            .where(MlflowCursor.id == _CURSOR_ID, MlflowCursor.job_id < through)
            .values(job_id=through)
        )
    try:
        session.commit()
    except IntegrityError:  # another exporter made the same rows first: they exist, which is all we need
        session.rollback()
        return 0
    return len(made)


def due_exports(session: Session, now: datetime, limit: int) -> list[int]:
    """Job ids of unfinished exports whose time has come, longest waiting first."""
    query = (
        select(MlflowExport.job_id)
        .where(MlflowExport.done.is_(False), MlflowExport.next_attempt_at <= now)
        .order_by(MlflowExport.next_attempt_at)
        .limit(limit)
    )
    return list(session.scalars(query))


def claim(session: Session, job_id: int, now: datetime, hold: timedelta) -> int | None:
    """Take a due export for one pass: no other exporter finds it due until `hold` has passed (one that died
    mid-pass). Returns the claim's number, which every later write of the pass names, or None when another
    exporter claimed it first. Commits."""
    result = session.execute(
        update(MlflowExport)
        .where(
            MlflowExport.job_id == job_id,
            MlflowExport.done.is_(False),
            MlflowExport.next_attempt_at <= now,
        )
        .values(attempts=MlflowExport.attempts + 1, next_attempt_at=now + hold)
        .returning(MlflowExport.attempts)
    )
    attempt = result.scalar_one_or_none()
    session.commit()
    return attempt


def record(session: Session, job_id: int, attempt: int, **values: Any) -> bool:
    """Write what a pass did, only while the row is still its claim: a pass whose claim lapsed and was taken
    over leaves the newer one's record alone. Commits; False when the claim was lost."""
    result = session.execute(
        update(MlflowExport)
        .where(MlflowExport.job_id == job_id, MlflowExport.attempts == attempt)
        .values(**values)
    )
    session.commit()
    return bool(result.rowcount)  # type: ignore[attr-defined]


def metric_names(session: Session, job_id: int) -> list[str]:
    """The names of a job's metrics, one indexed lookup each (the primary key starts with job and name),
    where a DISTINCT would read every row of the job."""
    names: list[str] = []
    after = ""
    while True:
        following = (
            select(Metric.name)
            .where(Metric.job_id == job_id, Metric.name > after)
            .order_by(Metric.name)
            .limit(1)
        )
        name = session.scalar(following)
        if name is None:
            return names
        names.append(name)
        after = name


@dataclass(frozen=True)
class Point:
    name: str
    step: int
    value: float
    at: datetime


def unsent_metrics(session: Session, job_id: int, sent: dict[str, int], limit: int) -> list[Point]:
    """Up to `limit` of the job's metric rows past the steps already sent, in step order per name."""
    points: list[Point] = []
    for name in metric_names(session, job_id):
        room = limit - len(points)
        if room <= 0:
            break
        query = select(Metric.step, Metric.value, Metric.at).where(
            Metric.job_id == job_id, Metric.name == name
        )
        if name in sent:
            query = query.where(Metric.step > sent[name])
        rows = session.execute(query.order_by(Metric.step).limit(room))
        points += (Point(name, step, value, as_utc(at)) for step, value, at in rows)
    return points


def through(sent: dict[str, int], points: list[Point]) -> dict[str, int]:
    """The watermark once `points` are sent."""
    return {**sent, **{point.name: point.step for point in points}}

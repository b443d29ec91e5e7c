"""What a job produced, as the worker tailed it into SQL: metric series and checkpoints."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.errors import CheckpointNotFound
from app.services.jobs import get_job
from app.services.keys import Caller
from core.config import Settings
from core.models import Checkpoint, Metric
from core.storage import StoredObject, is_object_uri, locate


def list_metrics(
    session: Session, job_id: int, name: str | None, after_step: int | None, limit: int
) -> tuple[list[Metric], int | None]:
    """Ordered by step then name. A page never ends part-way through a step, so `after_step` alone resumes
    without losing rows; a single step with more names than `limit` comes whole."""
    get_job(session, job_id)
    query = select(Metric).where(Metric.job_id == job_id).order_by(Metric.step, Metric.name)
    if name is not None:
        query = query.where(Metric.name == name)
    if after_step is not None:
        query = query.where(Metric.step > after_step)
    rows = list(session.scalars(query.limit(limit + 1)))
    if len(rows) <= limit:
        return rows, None
    cut = rows[limit].step
    page = [row for row in rows[:limit] if row.step < cut]
    if not page:
        page = list(session.scalars(query.where(Metric.step == cut)))
    return page, page[-1].step


def list_checkpoints(session: Session, job_id: int) -> list[Checkpoint]:
    get_job(session, job_id)
    query = select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step, Checkpoint.id)
    return list(session.scalars(query))


def owned_checkpoint(session: Session, checkpoint_id: int, caller: Caller) -> Checkpoint:
    """Another user's checkpoint is reported missing, exactly like an absent one."""
    checkpoint = session.get(Checkpoint, checkpoint_id)
    if checkpoint is None or not caller.may_see(get_job(session, checkpoint.job_id).owner):
        raise CheckpointNotFound(
            f"checkpoint {checkpoint_id} does not exist; list a job's with GET /v1/jobs/{{id}}/checkpoints"
        )
    return checkpoint


def _open(settings: Settings, path: str) -> Path | StoredObject | None:
    """A local file, or the object an s3:// path names, opened; None when neither is there any more."""
    if not is_object_uri(path):
        return Path(path) if Path(path).is_file() else None
    found = locate(settings, path)
    return None if found is None else found[0].open(found[1])


def checkpoint_content(
    session: Session, settings: Settings, checkpoint_id: int, caller: Caller
) -> tuple[Checkpoint, Path | StoredObject]:
    checkpoint = owned_checkpoint(session, checkpoint_id, caller)
    content = _open(settings, checkpoint.path)
    if content is None:
        raise CheckpointNotFound(
            f"checkpoint {checkpoint_id}'s file is gone (the job kept only its last checkpoints); "
            f"pick a newer one from GET /v1/jobs/{checkpoint.job_id}/checkpoints"
        )
    return checkpoint, content

"""Tailing the trainer's events.jsonl into SQL. Every write is idempotent: re-reading the file is harmless.

Checkpoints go to the job's uploads (worker/uploads.py), which write their rows once the files are stored."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core.models import Base, Job, Metric, utcnow
from core.states import JobStatus
from core.transitions import move
from trainers.events import (
    CheckpointEvent,
    CheckpointRemovedEvent,
    DoneEvent,
    Event,
    MetricsEvent,
    PhaseEvent,
    parse_event,
)

if TYPE_CHECKING:
    from worker.uploads import Uploads

log = logging.getLogger(__name__)

MAX_READ_BYTES = 1 << 20  # one batch, one transaction: bounded even when catching up on a long file
INSERT_CHUNK_ROWS = 500


class EventTail:
    """Reads complete lines past a byte offset; a half-written last line waits for its newline."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset

    def read(self) -> list[Event]:
        try:
            with self.path.open("rb") as f:
                if f.seek(0, 2) < self.offset:  # the file was replaced or truncated: start over
                    self.offset = 0
                f.seek(self.offset)
                chunk = f.read(MAX_READ_BYTES)
        except FileNotFoundError:
            return []
        complete = chunk[: chunk.rfind(b"\n") + 1]
        start = self.offset
        self.offset += len(complete)
        return [event for line in complete.splitlines() if (event := _parse(line, start)) is not None]

    def drain(self) -> list[Event]:
        """Everything complete that is left, for when the writer has exited."""
        events: list[Event] = []
        while True:
            before = self.offset
            events += self.read()
            if self.offset == before:
                return events


def _parse(line: bytes, batch_offset: int) -> Event | None:
    if not line.strip():
        return None
    try:
        return parse_event(line.decode("utf-8"))
    except (ValidationError, UnicodeDecodeError) as exc:
        # One bad line must not stop the stream, nor be retried forever.
        log.warning("skipping an unreadable event in the batch from byte %d: %s", batch_offset, exc)
        return None


def insert_ignoring_duplicates(session: Session, model: type[Base], rows: list[dict[str, Any]]) -> None:
    postgres = session.get_bind().dialect.name == "postgresql"
    # Chunks keep each statement under SQLite's limit on bound parameters.
    for start in range(0, len(rows), INSERT_CHUNK_ROWS):
        chunk = rows[start : start + INSERT_CHUNK_ROWS]
        insert = postgresql.insert(model) if postgres else sqlite.insert(model)
        session.execute(insert.values(chunk).on_conflict_do_nothing())


def _finite_or_none(value: float) -> float | None:
    # JSON columns cannot hold NaN/inf (Postgres refuses them); a diverged loss shows as null.
    return value if math.isfinite(value) else None


def _metric_rows(job_id: int, event: MetricsEvent) -> list[dict[str, Any]]:
    at = utcnow()
    return [
        {"job_id": job_id, "name": name, "step": event.step, "epoch": event.epoch, "value": value, "at": at}
        for name, value in event.values.items()
        # Metric.value is NOT NULL and SQLite stores NaN as NULL, so non-finite values stay out of it.
        if math.isfinite(value)
    ]


def apply_events(session: Session, job_id: int, events: Sequence[Event], uploads: Uploads) -> None:
    """Write one batch of events; the caller's transaction makes the batch all or nothing. Checkpoints queued
    for upload before a failed commit are queued again when the batch is re-read, which stores them once."""
    metrics: list[dict[str, Any]] = []
    latest: dict[str, float | None] = {}
    progress: tuple[int, int | None] | None = None
    for event in events:
        if isinstance(event, PhaseEvent):
            move(session, job_id, JobStatus.STARTING, JobStatus.RUNNING, running_at=utcnow())
        elif isinstance(event, MetricsEvent):
            metrics += _metric_rows(job_id, event)
            latest.update({name: _finite_or_none(value) for name, value in event.values.items()})
            progress = (event.step, event.total_steps)
        elif isinstance(event, CheckpointEvent):
            uploads.checkpoint_saved(session, event)
        elif isinstance(event, CheckpointRemovedEvent):
            uploads.checkpoint_removed(session, event)
        elif isinstance(event, DoneEvent):
            progress = (event.step, progress[1] if progress else None)
    insert_ignoring_duplicates(session, Metric, metrics)
    if progress is not None:
        _update_progress(session, job_id, progress, latest)


def _update_progress(
    session: Session, job_id: int, progress: tuple[int, int | None], latest: dict[str, float | None]
) -> None:
    job = session.get(Job, job_id)
    if job is None:
        return
    job.progress_step = progress[0]
    if progress[1] is not None:
        job.progress_total = progress[1]
    # A new dict, not an in-place update: SQLAlchemy does not track mutation inside a JSON value.
    job.latest_metrics = {**(job.latest_metrics or {}), **latest}

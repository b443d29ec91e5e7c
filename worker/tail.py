"""Tailing the trainer's events.jsonl into SQL. Every write is idempotent: re-reading the file is harmless.

Checkpoints go to the job's uploads (worker/uploads.py), which write their rows once the files are stored."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from core.db import session_scope
from core.models import Job, JobEvent, Metric, utcnow
from core.states import JobStatus
from core.transitions import move
from core.upsert import insert_ignoring_duplicates
from jobspec.events import (
    EVENTS_FILE,
    CheckpointEvent,
    CheckpointRemovedEvent,
    DoneEvent,
    MetricsEvent,
    PhaseEvent,
    StartupEvent,
    WarningEvent,
)
from jobspec.files import JobFileError, inside, open_job_file
from jobspec.startup import WORKER_MARKS, Mark
from worker.event_lines import BadLine, Read, parse_line, split_lines
from worker.metric_caps import Admitted, MetricCounts

if TYPE_CHECKING:
    from worker.uploads import Uploads

log = logging.getLogger(__name__)

MAX_READ_BYTES = 1 << 20  # one batch, one transaction: bounded even when catching up on a long file
BAD_EVENT = "bad_event"
METRIC_NAMES_CAP = "metric_names_cap"
METRIC_ROWS_CAP = "metric_rows_cap"


class EventTail:
    """Reads complete lines past a byte offset; a half-written last line waits for its newline, unless it is
    already too long to be an event: then it is skipped as far as it is read, and its rest when it comes."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset

    def read(self) -> list[Read]:
        try:
            # The ranks write it: a link, a FIFO or a folder in its place is never read (nor waited on).
            with open_job_file(self.path.parent, self.path.name, None).file as f:
                if f.seek(0, 2) < self.offset:  # the file was replaced or truncated: start over
                    self.offset = 0
                # From the byte before the offset, which tells whether the offset is at a line's start.
                f.seek(max(self.offset - 1, 0))
                chunk = f.read(MAX_READ_BYTES)
        except JobFileError:  # none yet, or refused
            return []
        mid_line = self.offset > 0 and chunk[:1] != b"\n"
        consumed, lines = split_lines(chunk[1:] if self.offset else chunk, mid_line)
        start = self.offset
        self.offset += consumed
        return [event for at, line in lines if (event := parse_line(line, start + at)) is not None]

    def drain(self) -> list[Read]:
        """Everything complete that is left, for when the writer has exited."""
        events: list[Read] = []
        while True:
            before = self.offset
            events += self.read()
            if self.offset == before:
                return events


def _finite_or_none(value: float) -> float | None:
    # JSON columns cannot hold NaN/inf (Postgres refuses them); a diverged loss shows as null.
    return value if math.isfinite(value) else None


def _metric_rows(job_id: int, event: MetricsEvent) -> list[dict[str, Any]]:
    # When the trainer reported the step: a batch read after a pause holds many steps, which must not share
    # the moment they were read.
    at = datetime.fromtimestamp(event.time, UTC)
    return [
        {"job_id": job_id, "name": name, "step": event.step, "epoch": event.epoch, "value": value, "at": at}
        for name, value in event.values.items()
        # Metric.value is NOT NULL and SQLite stores NaN as NULL, so non-finite values stay out of it.
        if math.isfinite(value)
    ]


def pump(
    tail: EventTail, job_id: int, uploads: Uploads, counts: MetricCounts, *, drain: bool = False
) -> list[Read]:
    """The tail's new events (all of them with `drain`) into SQL in one transaction, returned (none: nothing
    new); on a database error the offset goes back and the counts are forgotten, so the next call reads the
    same events again."""
    start = tail.offset
    events = tail.drain() if drain else tail.read()
    if not events:
        return events
    try:
        with session_scope() as session:
            apply_events(session, job_id, events, uploads, counts)
    except SQLAlchemyError:
        tail.offset = start
        counts.forget()
        raise
    return events


def apply_events(
    session: Session,
    job_id: int,
    events: Sequence[Read],
    uploads: Uploads,
    counts: MetricCounts | None = None,
) -> None:
    """Write one batch of events; the caller's transaction makes the batch all or nothing. Checkpoints queued
    for upload before a failed commit are queued again when the batch is re-read, which stores them once.

    `counts` are the job's metric rows per name, which a supervisor keeps across its batches (and forgets
    when a transaction fails); without them they are counted for this batch alone."""
    metrics: list[dict[str, Any]] = []
    latest: dict[str, float | None] = {}
    progress: tuple[int, int | None] | None = None
    bad: list[BadLine] = []
    for event in events:
        if isinstance(event, BadLine):
            bad.append(event)
        elif isinstance(event, PhaseEvent):
            move(session, job_id, JobStatus.STARTING, JobStatus.RUNNING, running_at=utcnow())
        elif isinstance(event, StartupEvent):
            _rank_marks(session, job_id, event)
        elif isinstance(event, MetricsEvent):
            metrics += _metric_rows(job_id, event)
            latest.update({name: _finite_or_none(value) for name, value in event.values.items()})
            progress = (event.step, event.total_steps)
        elif isinstance(event, CheckpointEvent):
            _checkpoint_saved(session, job_id, event, uploads)
        elif isinstance(event, CheckpointRemovedEvent):
            uploads.checkpoint_removed(session, event)
        elif isinstance(event, DoneEvent):
            progress = (event.step, progress[1] if progress else None)
        elif isinstance(event, WarningEvent):
            note(session, job_id, event.reason, event.message)
    if bad:
        _skipped(session, job_id, bad)
    if latest:
        latest = _store_metrics(session, job_id, metrics, latest, counts or MetricCounts.from_settings())
    if progress is not None:
        _update_progress(session, job_id, progress, latest)


def _skipped(session: Session, job_id: int, bad: list[BadLine]) -> None:
    first = bad[0]
    log.warning(
        "job %s: skipped %d bad lines of %s; the first, at byte %d: %s",
        job_id,
        len(bad),
        EVENTS_FILE,
        first.offset,
        first.why,
    )
    message = (
        f"skipped lines of {EVENTS_FILE} that are no event Trainyard can store ({len(bad)} in this read; "
        f"later ones are skipped without another event). The first, at byte {first.offset}: {first.why}"
    )
    note(session, job_id, BAD_EVENT, message)


def _store_metrics(
    session: Session,
    job_id: int,
    rows: list[dict[str, Any]],
    latest: dict[str, float | None],
    counts: MetricCounts,
) -> dict[str, float | None]:
    """The rows within the job's caps, each cap reached said once; the latest values of the names kept."""
    admitted = counts.admit(session, job_id, latest, rows)
    counts.stored(insert_ignoring_duplicates(session, Metric, admitted.rows))
    _note_caps(session, job_id, admitted, counts)
    return {name: value for name, value in latest.items() if name in admitted.names}


def _note_caps(session: Session, job_id: int, admitted: Admitted, counts: MetricCounts) -> None:
    if admitted.names_refused:
        refused = ", ".join(repr(name) for name in admitted.names_refused[:5])
        message = (
            f"this job reports more than {counts.max_names} metric names (TRAINYARD_JOB_MAX_METRIC_NAMES): "
            f"later names are not stored, starting with {refused}; report fewer names"
        )
        note(session, job_id, METRIC_NAMES_CAP, message)
    # One event per metric that reaches its cap, for the job's whole life: the counts know which were told.
    if (reached := counts.reached()) and (job := session.get(Job, job_id)) is not None:
        for message in reached:
            _add_note(session, job, METRIC_ROWS_CAP, message)


def _rank_marks(session: Session, job_id: int, event: StartupEvent) -> None:
    job = session.get(Job, job_id)
    if job is not None:
        add_marks(job, {name: at for name, at in event.marks.items() if name not in WORKER_MARKS})


def attempt_marks(timings: dict[str, Any] | None, attempt: int) -> dict[str, float]:
    """The start-up marks jobs.timings holds for `attempt`; none when it holds another attempt's."""
    return dict(timings["marks"]) if timings is not None and timings.get("attempt") == attempt else {}


def add_marks(job: Job, marks: Mapping[Mark, float]) -> None:
    """Start-up marks into the job's timings for its current attempt; the first marks of an attempt start a
    new record, so an earlier attempt's never mix in."""
    # A new dict, not an in-place update: SQLAlchemy does not track mutation inside a JSON value.
    job.timings = {"attempt": job.attempt, "marks": {**attempt_marks(job.timings, job.attempt), **marks}}


def _checkpoint_saved(session: Session, job_id: int, event: CheckpointEvent, uploads: Uploads) -> None:
    # Any rank can write the events file and links in its run directory: the event's text was checked as it
    # was parsed, and here where a link on its way leads.
    try:
        found = inside(uploads.run_dir / event.path, uploads.run_dir)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of links, which a rank can make
        log.warning("job %s: not recording checkpoint %s: %s", job_id, event.path, exc)
        return
    if found is None:
        log.warning(
            "job %s: not recording checkpoint %s: it leads outside the run directory", job_id, event.path
        )
        return
    uploads.checkpoint_saved(session, event)


def note(session: Session, job_id: int, reason: str, message: str) -> None:
    """A job event that moves nothing (from and to are the job's status now), listed with its transitions.
    One per attempt and reason: events read again, or a rank repeating itself, add no more rows."""
    job = session.get(Job, job_id)
    if job is None:
        return
    noted = select(JobEvent.id).where(
        JobEvent.job_id == job_id, JobEvent.reason == reason, JobEvent.attempt == job.attempt
    )
    if session.scalar(noted.limit(1)) is None:
        _add_note(session, job, reason, message)


def _add_note(session: Session, job: Job, reason: str, message: str) -> None:
    session.add(
        JobEvent(
            job_id=job.id,
            from_status=job.status,
            to_status=job.status,
            reason=reason,
            message=message,
            attempt=job.attempt,
        )
    )


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

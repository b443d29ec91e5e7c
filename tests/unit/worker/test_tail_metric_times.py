"""Metric rows carry the moment the trainer reported their step, not the moment the worker read the batch."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select

from core.db import session_scope
from core.models import Metric
from jobspec.events import MetricsEvent, append_event
from worker.tail import EventTail, apply_events
from worker.uploads import Uploads

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

REPORTED_AT = {10: 1_700_000_000.25, 20: 1_700_000_042.5, 30: 1_700_000_099.0}


def test_steps_read_in_one_batch_keep_their_own_times(database: WorkerDb, tmp_path: Path) -> None:
    job_id = database.add_job()
    path = tmp_path / "events.jsonl"
    for step, at in REPORTED_AT.items():
        append_event(path, MetricsEvent(step=step, total_steps=30, epoch=1, values={"loss": 1.0}, time=at))
    with session_scope() as session:
        apply_events(session, job_id, EventTail(path).drain(), Uploads(job_id, tmp_path, launcher_log=True))
    with session_scope() as session:
        rows = session.execute(select(Metric.step, Metric.at).order_by(Metric.step)).all()
    assert [(step, at.replace(tzinfo=UTC)) for step, at in rows] == [
        (step, datetime.fromtimestamp(at, UTC)) for step, at in REPORTED_AT.items()
    ]

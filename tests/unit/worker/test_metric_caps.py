"""Per-job caps on metric names and on rows per name: rows past them are dropped, not the job, and each cap
says so once. Counts come from one grouped COUNT when a supervisor starts, never a query per event."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import event

from core.config import get_settings
from core.db import get_engine
from tests.unit.worker.event_bounds import (
    MAX_NAMES,
    MAX_ROWS,
    caps_names_and_rows,
    job_events,
    new_run,
    pump,
    report,
    stored,
)
from worker.metric_caps import MetricCounts
from worker.tail import METRIC_ROWS_CAP

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


@pytest.fixture
def caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_JOB_MAX_METRIC_NAMES", str(MAX_NAMES))
    monkeypatch.setenv("TRAINYARD_JOB_MAX_METRIC_ROWS", str(MAX_ROWS))
    get_settings.cache_clear()


def test_a_job_past_its_caps_keeps_the_capped_counts_and_is_told_once_per_cap(
    database: WorkerDb, caps: None
) -> None:
    caps_names_and_rows(database)


def test_steps_reported_again_after_a_restart_take_no_room(database: WorkerDb, caps: None) -> None:
    job_id, run_dir = new_run(database)
    path = run_dir / "events.jsonl"
    report(path, range(1, 4), names=1)
    pump(job_id, run_dir, MetricCounts.from_settings())
    # Restarted from its checkpoint at step 1, the job reports steps 2 and 3 again, then step 4: the cap's.
    report(path, range(2, 5), names=1)
    pump(job_id, run_dir, MetricCounts.from_settings())
    assert stored() == {"m0": MAX_ROWS}
    assert job_events(job_id, METRIC_ROWS_CAP) == []


@pytest.fixture
def statements() -> Iterator[list[str]]:
    said: list[str] = []

    def record(*args: Any) -> None:
        said.append(args[2])

    event.listen(get_engine(), "before_cursor_execute", record)
    yield said
    event.remove(get_engine(), "before_cursor_execute", record)


def test_a_supervisor_counts_rows_once_not_per_batch(database: WorkerDb, statements: list[str]) -> None:
    job_id, run_dir = new_run(database)
    counts = MetricCounts.from_settings()
    for batch in range(5):
        report(run_dir / "events.jsonl", range(batch * 10 + 1, batch * 10 + 11), names=2)
        pump(job_id, run_dir, counts)
    assert stored() == {"m0": 50, "m1": 50}
    assert sum("count(" in statement.lower() for statement in statements) == 2  # the load, and stored()

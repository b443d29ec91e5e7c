"""Per-job caps on metric names and on rows per name: rows past them are dropped, not the job; one metric at
its cap stops only its own rows, each metric that reaches it is told once, and a sweep trial keeps its
objective. Counts come from one grouped COUNT when a supervisor starts, never a query per event."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import event, select

from core.config import get_settings
from core.db import get_engine, session_scope
from core.models import Metric, Sweep
from jobspec.events import MetricsEvent, append_event
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
    assert len(job_events(job_id, METRIC_ROWS_CAP)) == 1  # told as it reached the cap, not again


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


def test_a_metric_at_its_cap_stops_only_its_own_rows_and_each_is_told_once(
    database: WorkerDb, caps: None
) -> None:
    """The report: a per-step `loss` reached the cap and stopped every metric of the job. A supervisor reads
    each report as it comes; a second one (a restart) reads the file again and more comes."""
    job_id, run_dir = new_run(database)
    path = run_dir / "events.jsonl"
    counts = MetricCounts.from_settings()
    for step in range(1, 31):
        values = {"loss": float(step), **({"val": float(step)} if step % 5 == 0 else {})}
        append_event(path, MetricsEvent(step=step, total_steps=100, epoch=1, values=values))
        pump(job_id, run_dir, counts)
    append_event(path, MetricsEvent(step=35, total_steps=100, epoch=1, values={"val": 35.0, "acc": 1.0}))
    pump(job_id, run_dir, MetricCounts.from_settings())

    assert stored() == {"loss": MAX_ROWS, "val": MAX_ROWS, "acc": 1}
    assert steps_of(job_id, "val") == [5, 10, 15, 20]  # stored after `loss` had reached its cap at step 4
    told = job_events(job_id, METRIC_ROWS_CAP)
    assert sorted(message.split(" reached ")[0] for message in told) == ["metric 'loss'", "metric 'val'"]
    assert all(f"reached {MAX_ROWS} rows (TRAINYARD_JOB_MAX_METRIC_ROWS" in message for message in told)


def steps_of(job_id: int, name: str) -> list[int]:
    with session_scope() as session:
        query = select(Metric.step).where(Metric.job_id == job_id, Metric.name == name).order_by(Metric.step)
        return list(session.scalars(query))


def trial_job(database: WorkerDb, objective: str) -> int:
    """A sweep's first trial's job; the sweep's request stored as given, as the API stores it."""
    request = {
        "name": "lr",
        "spec": database.spec(),
        "parameters": {"train.lr": {"type": "float", "low": 1e-3, "high": 1.0}},
        "objective": {"metric": objective},
        "max_trials": 1,
    }
    with session_scope() as session:
        sweep = Sweep(name="lr", owner="local", status="running", config=request)
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    return database.add_job(sweep_id=sweep_id, trial=0)


def test_a_sweep_trial_keeps_its_objective_past_the_caps(database: WorkerDb, caps: None) -> None:
    """Its value is its last report of the objective: past the rows cap the newest report still goes in, in
    place of the one before it, and the names cap never refuses the objective."""
    job_id = trial_job(database, "loss")
    run_dir = database.runs_dir / str(job_id)
    run_dir.mkdir(parents=True)
    path = run_dir / "events.jsonl"
    others = {f"x{i}": 0.0 for i in range(MAX_NAMES)}  # the names cap, full before the objective comes
    append_event(path, MetricsEvent(step=0, total_steps=100, epoch=1, values=others))
    counts = MetricCounts.from_settings()
    for step in range(1, 21):
        append_event(path, MetricsEvent(step=step, total_steps=100, epoch=1, values={"loss": 100.0 - step}))
        pump(job_id, run_dir, counts)
    assert steps_of(job_id, "loss") == [1, 2, 3, 4, 20]
    # A restart reads the whole file again, then reports on, several steps in one batch.
    for step in range(21, 26):
        append_event(path, MetricsEvent(step=step, total_steps=100, epoch=1, values={"loss": 100.0 - step}))
    pump(job_id, run_dir, MetricCounts.from_settings())

    assert steps_of(job_id, "loss") == [1, 2, 3, 4, 25]
    with session_scope() as session:
        last = select(Metric.value).where(Metric.job_id == job_id, Metric.name == "loss")
        assert session.scalar(last.order_by(Metric.step.desc()).limit(1)) == 75.0  # the trial's value
    (told,) = job_events(job_id, METRIC_ROWS_CAP)
    assert "only its newest report is kept, as the sweep trial's value" in told

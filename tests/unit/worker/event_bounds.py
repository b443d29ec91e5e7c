"""Scenarios of untrusted event files, run on SQLite (tests/unit/worker/test_tail_bounds.py,
test_metric_caps.py) and on PostgreSQL (tests/integration/test_event_bounds_postgres.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from core.db import session_scope
from core.models import Checkpoint, JobEvent, Metric
from jobspec.events import MetricsEvent, append_event
from worker.metric_caps import MetricCounts
from worker.tail import BAD_EVENT, METRIC_NAMES_CAP, METRIC_ROWS_CAP, EventTail, apply_events
from worker.uploads import Uploads

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

MAX_NAMES = 3  # the caps the tests set
MAX_ROWS = 4


def metrics(step: int, **values: Any) -> dict[str, Any]:
    return {"kind": "metrics", "step": step, "total_steps": 3, "epoch": 1, "values": values}


# One per line, in order; True where the line is bad. NaN and Infinity values are not bad: a diverged loss is
# reported so, and shows as null.
LINES: list[tuple[str, bool]] = [
    (json.dumps(metrics(1, loss=1.0)), False),
    (json.dumps(metrics(2**64, loss=1.0)), True),
    (json.dumps(metrics(2, loss=float("nan"), accuracy=float("inf"), lr=0.1)), False),
    (json.dumps({**metrics(2, lr=0.2), "time": float("nan")}), True),
    (json.dumps(metrics(2, **{"x" * 10_000: 1.0})), True),
    ("not json", True),
    (json.dumps({**metrics(2, lr=0.3), "pad": "x" * (1 << 20)}), True),
    (json.dumps({"kind": "checkpoint", "step": 2**40, "epoch": 1, "path": "c.pt", "size_bytes": 1}), True),
    (json.dumps({"kind": "warning", "step": 2, "reason": "cuda_graphs", "message": "a\0b"}), True),
    (json.dumps({"kind": "startup", "marks": {"queued": 1e300}}), True),
    (json.dumps(metrics(3, loss=0.5)), False),
    (json.dumps({"kind": "done", "step": 3}), False),
]


def new_run(database: WorkerDb) -> tuple[int, Path]:
    """A job and its empty run directory."""
    job_id = database.add_job()
    run_dir = database.runs_dir / str(job_id)
    run_dir.mkdir(parents=True)
    return job_id, run_dir


def pump(job_id: int, run_dir: Path, counts: MetricCounts) -> None:
    """What a supervisor does at each tick, until the file has nothing new: one read, one transaction."""
    tail = EventTail(run_dir / "events.jsonl")
    uploads = Uploads(job_id, run_dir, launcher_log=True)
    while True:
        start = tail.offset
        events = tail.read()
        if tail.offset == start:
            return
        if events:
            with session_scope() as session:
                apply_events(session, job_id, events, uploads, counts)


def job_events(job_id: int, reason: str) -> list[str]:
    with session_scope() as session:
        query = select(JobEvent.message).where(JobEvent.job_id == job_id, JobEvent.reason == reason)
        return [message or "" for message in session.scalars(query)]


def skips_bad_lines_and_stores_the_rest(database: WorkerDb) -> None:
    job_id, run_dir = new_run(database)
    (run_dir / "events.jsonl").write_text("".join(line + "\n" for line, _ in LINES))

    pump(job_id, run_dir, MetricCounts.from_settings())

    with session_scope() as session:
        rows = session.execute(select(Metric.name, Metric.step, Metric.value).order_by(Metric.step)).all()
    assert rows == [("loss", 1, 1.0), ("lr", 2, 0.1), ("loss", 3, 0.5)]
    job = database.job(job_id)
    assert (job.progress_step, job.progress_total) == (3, 3)
    assert job.latest_metrics == {"loss": 0.5, "accuracy": None, "lr": 0.1}
    (warning,) = job_events(job_id, BAD_EVENT)
    first = len(LINES[0][0]) + 1
    assert warning.startswith("skipped lines of events.jsonl that are no event Trainyard can store")
    assert warning.endswith(
        f"at byte {first}: metrics.step: Input should be less than or equal to 2147483647"
    )
    assert "\0" not in warning and len(warning) < 1000


def report(path: Path, steps: range, names: int) -> None:
    for step in steps:
        values = {f"m{i}": float(step) for i in range(names)}
        append_event(path, MetricsEvent(step=step, total_steps=100, epoch=1, values=values))


def stored() -> dict[str, int]:
    with session_scope() as session:
        grouped = select(Metric.name, func.count()).group_by(Metric.name)
        return {name: count for name, count in session.execute(grouped)}


def caps_names_and_rows(database: WorkerDb) -> None:
    job_id, run_dir = new_run(database)
    path = run_dir / "events.jsonl"
    report(path, range(1, 11), names=6)
    pump(job_id, run_dir, MetricCounts.from_settings())
    # A supervisor of the next attempt counts again, reads the file again from its start, and more comes.
    report(path, range(11, 21), names=6)
    pump(job_id, run_dir, MetricCounts.from_settings())

    assert stored() == {"m0": MAX_ROWS, "m1": MAX_ROWS, "m2": MAX_ROWS}
    assert set(database.job(job_id).latest_metrics) == {"m0", "m1", "m2"}
    (names,) = job_events(job_id, METRIC_NAMES_CAP)
    assert "more than 3 metric names" in names and "'m3', 'm4', 'm5'" in names
    # One event per metric at its cap, however many batches and supervisors saw rows dropped.
    assert sorted(job_events(job_id, METRIC_ROWS_CAP)) == [
        f"metric 'm{i}' reached 4 rows (TRAINYARD_JOB_MAX_METRIC_ROWS, counted per metric name): its "
        "later rows are not stored (its latest value is still shown); other metrics are stored as before. "
        "Report it less often (metrics.every_n_steps)"
        for i in range(3)
    ]


def stores_a_checkpoint_past_2_gib(database: WorkerDb) -> None:
    """A real checkpoint passes 2 GiB: its row holds its size (a 32-bit column failed the insert at every
    tick on PostgreSQL, and the job never finished)."""
    job_id, run_dir = new_run(database)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "step-00000001.pt").write_bytes(b"weights")
    size = 3 << 30
    event = {"kind": "checkpoint", "step": 1, "epoch": 0, "path": "checkpoints/step-00000001.pt"}
    (run_dir / "events.jsonl").write_text(json.dumps({**event, "size_bytes": size}) + "\n")

    pump(job_id, run_dir, MetricCounts.from_settings())

    with session_scope() as session:
        assert session.scalars(select(Checkpoint.size_bytes).where(Checkpoint.job_id == job_id)).all() == [
            size
        ]

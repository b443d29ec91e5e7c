"""The run directory read back: the event tail (complete lines, idempotent batches), and how a run ended."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import func, select

from core.db import session_scope
from core.models import Checkpoint, GpuLease, JobEvent, Metric
from core.states import JobStatus
from jobspec.events import (
    CheckpointEvent,
    CheckpointRemovedEvent,
    MetricsEvent,
    PhaseEvent,
    append_event,
)
from jobspec.plan import RunConfig
from worker.event_lines import BadLine
from worker.executors.local.leases import WAITING_FOR_GPUS, claim_job
from worker.executors.local.runner import run_job
from worker.tail import EventTail, apply_events
from worker.uploads import Uploads

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


def metrics_event(step: int, **values: float) -> MetricsEvent:
    return MetricsEvent(step=step, total_steps=100, epoch=0, values=values)


def test_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    whole = json.dumps(metrics_event(1, loss=2.0).model_dump(mode="json")) + "\n"
    second = json.dumps(metrics_event(2, loss=1.5).model_dump(mode="json")) + "\n"
    path.write_text(whole + second[:10])
    tail = EventTail(path)
    assert [e.step for e in tail.read() if isinstance(e, MetricsEvent)] == [1]
    assert tail.offset == len(whole)
    assert tail.read() == []
    with path.open("a") as f:
        f.write(second[10:])
    assert [e.step for e in tail.read() if isinstance(e, MetricsEvent)] == [2]
    assert tail.read() == []


def test_missing_file_and_bad_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = EventTail(path)
    assert tail.read() == []
    path.write_text('{"kind": "nonsense"}\nnot json\n')
    append_event(path, PhaseEvent(phase="running"))
    nonsense, not_json, phase = tail.drain()
    assert isinstance(nonsense, BadLine) and nonsense.offset == 0 and "kind" in nonsense.why
    assert isinstance(not_json, BadLine) and not_json.offset == 21 and "Invalid JSON" in not_json.why
    assert isinstance(phase, PhaseEvent)


def test_replaced_file_is_read_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    append_event(path, metrics_event(1, loss=1.0))
    append_event(path, metrics_event(2, loss=1.0))
    tail = EventTail(path)
    tail.drain()
    path.unlink()
    append_event(path, metrics_event(3, loss=1.0))
    assert [e.step for e in tail.read() if isinstance(e, MetricsEvent)] == [3]


FIRST = (
    PhaseEvent(phase="running"),
    metrics_event(10, loss=2.0, accuracy=0.5),
    CheckpointEvent(step=10, epoch=0, path="checkpoints/step10.pt", size_bytes=123),
)
THEN = (
    metrics_event(20, loss=1.0, lr=float("nan")),
    CheckpointEvent(step=20, epoch=0, path="checkpoints/step20.pt", size_bytes=123),
    CheckpointRemovedEvent(path="checkpoints/step10.pt"),
)


def checkpoints() -> list[str]:
    with session_scope() as session:
        return list(session.scalars(select(Checkpoint.path).order_by(Checkpoint.step)))


def test_batches_land_in_sql_and_retailing_changes_nothing(database: WorkerDb) -> None:
    job_id = database.add_job()
    claim_job(job_id)
    run_dir = database.runs_dir / str(job_id)
    run_dir.mkdir(parents=True)
    path = run_dir / "events.jsonl"
    tail = EventTail(path)
    uploads = Uploads(job_id, run_dir, launcher_log=True)  # a shared runs directory: no upload, rows at once

    def pump(tail: EventTail) -> None:
        with session_scope() as session:
            apply_events(session, job_id, tail.drain(), uploads)

    for event in FIRST:
        append_event(path, event)
    pump(tail)
    assert database.job(job_id).status == JobStatus.RUNNING
    assert checkpoints() == [str(run_dir / "checkpoints/step10.pt")]
    for event in THEN:
        append_event(path, event)
    pump(tail)
    pump(EventTail(path))  # a worker re-reading the whole file from byte 0

    job = database.job(job_id)
    assert job.running_at is not None
    assert (job.progress_step, job.progress_total) == (20, 100)
    assert job.latest_metrics == {"loss": 1.0, "accuracy": 0.5, "lr": None}
    assert checkpoints() == [str(run_dir / "checkpoints/step20.pt")]
    with session_scope() as session:
        rows = select(Metric.name, Metric.step, Metric.value).order_by(Metric.step, Metric.name)
        assert session.execute(rows).all() == [("accuracy", 10, 0.5), ("loss", 10, 2.0), ("loss", 20, 1.0)]
        running = select(func.count()).where(JobEvent.job_id == job_id, JobEvent.to_status == "running")
        assert session.scalar(running) == 1


def leases() -> list[int]:
    with session_scope() as session:
        return list(session.scalars(select(GpuLease.gpu_index)))


def test_run_that_exits_0_succeeds_frees_its_gpus_and_rings_waiters(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("ok")
    job_id = database.add_job(database.spec(gpus=[1]))
    waiter = database.add_job(database.spec(gpus=[1]), status_reason=WAITING_FOR_GPUS)

    run_job(job_id)

    job = database.job(job_id)
    assert (job.status, job.status_reason, job.attempt) == (JobStatus.SUCCEEDED, "completed", 1)
    assert job.running_at is not None and job.finished_at is not None
    assert (job.progress_step, job.latest_metrics) == (10, {"loss": 0.5})
    assert job.plan["gpus"] == [1]
    config = RunConfig.model_validate_json((database.runs_dir / str(job_id) / "spec.json").read_text())
    assert (config.job_id, config.attempt, config.plan.gpus) == (job_id, 1, [1])
    assert leases() == []
    assert doorbell.rung == [waiter]


def test_failed_run_reports_the_error_file_message(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("error_file")
    job_id = database.add_job()
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.FAILED, "exception")
    assert job.message == "ValueError: bad batch"


def test_failed_run_without_error_file_reports_the_log_tail(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("crash")
    job_id = database.add_job()
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.FAILED, "crash")
    assert (job.message or "").startswith("exit code 1; last lines of logs/launcher.log:\n")
    assert (job.message or "").endswith("RuntimeError: out of cheese")

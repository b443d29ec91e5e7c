"""A job's events file is untrusted: a line that no column could hold, that is not JSON or that is too long is
skipped, the good lines around it are stored, and the job is told once. Never a crash, never a requeue."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from core import launch
from core.config import get_settings
from core.launch import Launch
from core.states import JobStatus
from jobspec.events import MAX_EVENT_BYTES, MetricsEvent
from jobspec.plan import Plan
from tests.unit.worker.event_bounds import (
    LINES,
    job_events,
    metrics,
    skips_bad_lines_and_stores_the_rest,
    stores_a_checkpoint_past_2_gib,
)
from worker.event_lines import BadLine
from worker.executors.local import runner
from worker.executors.local.runner import run_job
from worker.tail import BAD_EVENT, MAX_READ_BYTES, EventTail

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


def test_bad_lines_are_skipped_and_the_good_ones_around_them_stored(database: WorkerDb) -> None:
    skips_bad_lines_and_stores_the_rest(database)


def test_a_checkpoint_past_2_gib_is_recorded(database: WorkerDb) -> None:
    stores_a_checkpoint_past_2_gib(database)


def test_each_bad_line_is_named_with_its_offset_and_why(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(line + "\n" for line, _ in LINES))
    read = EventTail(path).drain()
    assert [isinstance(item, BadLine) for item in read] == [is_bad for _, is_bad in LINES]
    offsets = [sum(len(line) + 1 for line, _ in LINES[:i]) for i in range(len(LINES))]
    assert [item.offset for item in read if isinstance(item, BadLine)] == [
        at for at, (_, is_bad) in zip(offsets, LINES, strict=True) if is_bad
    ]
    whys = [item.why for item in read if isinstance(item, BadLine)]
    assert "metrics.time: Input should be a finite number" in whys
    assert any("is not 1 to 64 of" in why and len(why) < 500 for why in whys)
    assert f"the line is longer than {MAX_EVENT_BYTES} bytes" in whys


def test_a_line_too_long_is_skipped_while_still_being_written(tmp_path: Path) -> None:
    """Read as it grows, never whole: the tail moves past it once it is longer than any event, and its rest
    is skipped when its newline comes, even after a failed transaction took the offset back into it."""
    path = tmp_path / "events.jsonl"
    first = json.dumps(metrics(1, loss=1.0)) + "\n"
    path.write_text(first + "x" * (3 * MAX_READ_BYTES))
    tail = EventTail(path)
    read = tail.drain()
    assert [type(item) for item in read] == [MetricsEvent, BadLine]
    assert tail.offset == path.stat().st_size
    with path.open("a") as f:
        f.write("y" * 100 + "\n" + json.dumps(metrics(2, loss=0.5)) + "\n")
    tail.offset -= 50  # as a supervisor's failed transaction sets it back, inside the long line
    assert [getattr(item, "step", None) for item in tail.drain()] == [2]


# Stands in for torchrun: a program of the user's that writes bad lines among its events, then exits 0.
BAD_PROGRAM = """
import pathlib, sys
lines = pathlib.Path(sys.argv[2]).read_text()
(pathlib.Path(sys.argv[1]) / "events.jsonl").write_text(lines)
"""


def test_a_job_writing_bad_lines_succeeds_at_its_first_attempt(
    database: WorkerDb, doorbell: Doorbell, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before, the supervisor crashed on a step of 2**64 and the job was requeued as worker_lost."""
    monkeypatch.setattr(runner, "SHUTDOWN", threading.Event())
    events = tmp_path / "lines.jsonl"
    phase = json.dumps({"kind": "phase", "phase": "running"})
    events.write_text("".join(line + "\n" for line in [phase, *(line for line, _ in LINES)]))

    def build(plan: Plan, **kwargs: Any) -> Launch:
        real = launch.build_launch(plan, **kwargs)
        return Launch([sys.executable, "-c", BAD_PROGRAM, str(kwargs["run_dir"]), str(events)], real.env)

    monkeypatch.setattr(runner, "build_launch", build)
    get_settings.cache_clear()
    job_id = database.add_job()

    run_job(job_id)

    job = database.job(job_id)
    assert (job.status, job.status_reason, job.attempt, job.progress_step) == (
        JobStatus.SUCCEEDED,
        "completed",
        1,
        3,
    )
    assert len(job_events(job_id, BAD_EVENT)) == 1

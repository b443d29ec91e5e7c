"""limits.max_runtime_s counts training: until the attempt's first step the deadline is max_runtime_s after
the job was placed; once it runs, the attempt's start-up (launch to first step) is added. Every node reads
the same rows, so every node's supervisor agrees."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from core.models import utcnow
from core.states import JobStatus
from jobspec.startup import Mark
from worker.attempts.deadline import look, runtime_deadline
from worker.executors.local.kill import mark_for
from worker.executors.local.supervise import RunningJob

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

PLACED = datetime(2026, 11, 26, 10, 0, 0, tzinfo=UTC)
LAUNCHED = PLACED + timedelta(seconds=5)
RUNNING = LAUNCHED + timedelta(seconds=80)  # a long start-up


def test_until_the_first_step_the_limit_counts_from_placement() -> None:
    assert runtime_deadline(PLACED, 20) == PLACED + timedelta(seconds=20)
    assert runtime_deadline(PLACED, 20, LAUNCHED.timestamp(), None) == PLACED + timedelta(seconds=20)
    assert runtime_deadline(None, 20) is None
    assert runtime_deadline(PLACED, None, LAUNCHED.timestamp(), RUNNING) is None


def test_once_running_the_attempts_start_up_is_not_counted() -> None:
    deadline = runtime_deadline(PLACED, 20, LAUNCHED.timestamp(), RUNNING)
    assert deadline == PLACED + timedelta(seconds=20 + 80)
    # SQLite hands back naive UTC times.
    assert runtime_deadline(PLACED, 20, LAUNCHED.timestamp(), RUNNING.replace(tzinfo=None)) == deadline


@pytest.fixture
def running(database: WorkerDb) -> Any:
    """A job row as SQL holds it, and the RunningJob a supervisor holds for its attempt 1."""

    def make(**row: Any) -> RunningJob:
        now = utcnow()
        job_id = database.add_job(attempt=1, started_at=now - timedelta(seconds=100), **row)
        process = subprocess.Popen(["true"])
        process.wait()
        return RunningJob(
            job_id=job_id,
            attempt=1,
            mark=mark_for(job_id, 1, database.host, database.runs_dir),
            process=process,
            tail=None,  # as on a node other than 0: no tail, only the rows
            started_at=now - timedelta(seconds=100),
            max_runtime_s=20,
        )

    return make


def launched_at(seconds_ago: float, attempt: int = 1) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "marks": {Mark.LAUNCHED: (utcnow() - timedelta(seconds=seconds_ago)).timestamp()},
    }


def test_a_job_that_trains_after_a_long_start_up_is_within_its_limit(running: Any) -> None:
    # Placed 100 s ago, launched 95 s ago, its first step 10 s ago: 10 s of training of its 20.
    job = running(
        status=JobStatus.RUNNING, running_at=utcnow() - timedelta(seconds=10), timings=launched_at(95)
    )
    seen = look(job)
    assert seen is not None and seen.status is JobStatus.RUNNING
    assert seen.deadline is not None and seen.deadline > utcnow()


def test_a_start_up_past_the_limit_still_times_out(running: Any) -> None:
    job = running(status=JobStatus.STARTING, timings=launched_at(95))
    seen = look(job)
    assert seen is not None and seen.deadline is not None and seen.deadline < utcnow()


def test_an_earlier_attempts_launch_is_not_this_ones(running: Any) -> None:
    job = running(
        status=JobStatus.RUNNING,
        running_at=utcnow() - timedelta(seconds=10),
        timings=launched_at(95, attempt=0),
    )
    seen = look(job)
    assert seen is not None and seen.deadline is not None and seen.deadline < utcnow()

"""The worker's part of a job's start-up timings: the claim, the launch and a restart in place mark the
current attempt's record (jobs.timings), and the tail merges rank 0's marks into it without letting a rank
change the worker's own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from core.db import session_scope
from core.models import JobEvent
from core.states import JobStatus
from jobspec.events import StartupEvent
from jobspec.startup import Mark
from worker.executors.local.runner import run_job
from worker.tail import apply_events
from worker.uploads import Uploads

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


def submitted(database: WorkerDb, spec: dict[str, object] | None = None) -> int:
    """A job row with the event the API writes on submission, which the claim reads as its queued mark."""
    job_id = database.add_job(spec)
    with session_scope() as session:
        session.add(JobEvent(job_id=job_id, to_status=JobStatus.QUEUED, reason="submitted"))
    return job_id


def test_claim_and_launch_mark_the_attempt_and_a_rank_adds_only_its_own_marks(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("ok")
    job_id = submitted(database)
    run_job(job_id)
    timings = database.job(job_id).timings
    assert timings is not None and timings["attempt"] == 1
    worker_marks = timings["marks"]
    assert list(worker_marks) == [Mark.QUEUED, Mark.PLACED, Mark.LAUNCHED]
    assert worker_marks[Mark.QUEUED] <= worker_marks[Mark.PLACED] <= worker_marks[Mark.LAUNCHED]

    # A rank's event may name the worker's marks too (any rank can write the file); it adds only its own.
    rank = StartupEvent(marks={Mark.LAUNCHED: 0.0, Mark.PROCESS_STARTED: 1.0, Mark.FIRST_STEP: 2.0})
    later = StartupEvent(marks={Mark.FIRST_STEP: 2.0, Mark.FIRST_STEP_DONE: 3.0})
    with session_scope() as session:
        uploads = Uploads(job_id, database.runs_dir / str(job_id), launcher_log=True)
        apply_events(session, job_id, [rank, later], uploads)
    assert database.job(job_id).timings == {
        "attempt": 1,
        "marks": {
            **worker_marks,
            Mark.PROCESS_STARTED: 1.0,
            Mark.FIRST_STEP: 2.0,
            Mark.FIRST_STEP_DONE: 3.0,
        },
    }


def test_a_restart_in_place_starts_a_new_record_queued_and_placed_at_once(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("crash")
    job_id = submitted(database, {**database.spec(), "limits": {"max_restarts": 1}})
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.attempt) == (JobStatus.FAILED, 2)
    assert job.timings is not None and job.timings["attempt"] == 2
    marks = job.timings["marks"]
    assert list(marks) == [Mark.QUEUED, Mark.PLACED, Mark.LAUNCHED]
    assert marks[Mark.QUEUED] == marks[Mark.PLACED] <= marks[Mark.LAUNCHED]

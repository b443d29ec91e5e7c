"""Priority preemption through the claim path and the supervisor, with the fake trainer: the victim stops at
a checkpoint, is requeued, and resumes from it once the job that took its GPUs has run."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from core.config import get_settings
from core.db import session_scope
from core.models import Checkpoint, JobEvent, as_utc
from core.states import JobStatus
from core.transitions import move
from jobspec.events import SPEC_FILE
from tests.unit.worker.test_cpu_accounting import report_cores
from tests.unit.worker.test_kill import run_in_thread, wait_for_status
from tests.unit.worker_fixtures import Doorbell, WorkerDb
from worker.executors.local.leases import ClaimOutcome, claim_job, claim_next
from worker.executors.local.preempt import PREEMPTED_REASON

pytest_plugins = ["tests.unit.worker_fixtures"]


@pytest.fixture
def no_min_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_PREEMPT_MIN_RUNTIME_S", "0")
    monkeypatch.setenv("TRAINYARD_PREEMPT_GRACE_S", "1")
    get_settings.cache_clear()


EVERY_GPU: dict[str, object] = {"num_gpus": 4}
ONE_GPU: dict[str, object] = {"num_gpus": 1}


def events(job_id: int) -> list[tuple[str | None, str, str | None, str | None]]:
    with session_scope() as session:
        rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
        return [(e.from_status, e.to_status, e.reason, e.message) for e in rows]


def resumed_from(database: WorkerDb, job_id: int) -> str | None:
    config = json.loads((database.runs_dir / str(job_id) / SPEC_FILE).read_text())
    resume: str | None = config["plan"]["resume_path"]
    return resume


def checkpoints(job_id: int) -> int:
    with session_scope() as session:
        return session.scalar(select(func.count()).where(Checkpoint.job_id == job_id)) or 0


def wait_for_checkpoint(database: WorkerDb, job_id: int) -> None:
    wait_for_status(database, job_id, JobStatus.RUNNING)
    deadline = time.monotonic() + 20
    while not checkpoints(job_id):
        assert time.monotonic() < deadline, "no checkpoint recorded"
        time.sleep(0.05)


def preempt_and_resume(
    database: WorkerDb,
    fake_trainer: Callable[[str], None],
    victim_mode: str,
    wide: dict[str, object] = EVERY_GPU,
    narrow: dict[str, object] = ONE_GPU,
) -> int:
    """A priority-0 job on all four GPUs (or both cores), preempted by a priority-10 job; returns the victim's
    id once the thread that runs the queue has run both to the end."""
    fake_trainer(victim_mode)
    victim = database.add_job(database.spec(**wide))
    thread = run_in_thread(victim)
    wait_for_checkpoint(database, victim)
    fake_trainer("ok")
    urgent = database.add_job(database.spec(**narrow), priority=10)

    assert claim_job(urgent).outcome is ClaimOutcome.WAITING
    assert database.job(victim).status == JobStatus.PREEMPTING
    assert (
        database.job(urgent).message
        == f"waiting for job {victim} to stop: preempted for this job (priority 10)"
    )
    assert claim_job(urgent).outcome is ClaimOutcome.WAITING, "a second look stops no one else"

    thread.join(timeout=60)  # the victim stops, then the same thread runs the queue in start order
    assert not thread.is_alive()
    assert database.job(urgent).status == JobStatus.SUCCEEDED
    job = database.job(victim)
    assert (job.status, job.attempt) == (JobStatus.SUCCEEDED, 2)
    stopped = [event for event in events(victim) if event[2] == PREEMPTED_REASON]
    assert [event[:3] for event in stopped] == [
        (JobStatus.RUNNING, JobStatus.PREEMPTING, PREEMPTED_REASON),
        (JobStatus.PREEMPTING, JobStatus.QUEUED, PREEMPTED_REASON),
    ]
    assert f"preempted by job {urgent} (priority 10)" in (stopped[0][3] or "")
    starts = [e for e in events(urgent) + events(victim) if e[1] == JobStatus.STARTING]
    assert len(starts) == 3
    return victim


def test_a_higher_priority_job_preempts_and_the_victim_resumes_from_its_final_checkpoint(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None], no_min_runtime: None
) -> None:
    victim = preempt_and_resume(database, fake_trainer, "stop_on_term")
    assert (resumed_from(database, victim) or "").endswith("checkpoints/step-10.pt")


def test_a_higher_priority_cpu_job_preempts_and_the_victim_resumes_from_its_final_checkpoint(
    database: WorkerDb,
    doorbell: Doorbell,
    fake_trainer: Callable[[str], None],
    no_min_runtime: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 33 #7: on a host of two cores, a 2-core job is preempted for a 1-core job of higher priority,
    through the same path as a GPU job."""
    report_cores(monkeypatch, 2)
    victim = preempt_and_resume(
        database,
        fake_trainer,
        "stop_on_term",
        {"nproc_per_node": 2, "strategy": "ddp"},
        {"nproc_per_node": 1},
    )
    assert (resumed_from(database, victim) or "").endswith("checkpoints/step-10.pt")
    (asked,) = [event[3] for event in events(victim) if event[1] == JobStatus.PREEMPTING]
    assert "which takes its CPU cores" in (asked or "")


def test_a_victim_that_ignores_sigterm_is_killed_and_resumes_from_its_previous_checkpoint(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None], no_min_runtime: None
) -> None:
    victim = preempt_and_resume(database, fake_trainer, "ignore_term")
    assert (resumed_from(database, victim) or "").endswith("checkpoints/step-5.pt")


def running_on_every_gpu(database: WorkerDb, **spec: object) -> int:
    victim = database.add_job({**database.spec(num_gpus=4), **spec})
    assert claim_job(victim).outcome is ClaimOutcome.CLAIMED
    with session_scope() as session:
        move(session, victim, JobStatus.STARTING, JobStatus.RUNNING)
    return victim


@pytest.mark.parametrize(
    ("min_runtime_s", "limits"),
    [("600", {}), ("0", {"preemptible": False})],
    ids=["minimum-runtime", "not-preemptible"],
)
def test_guards_keep_the_victim_running(
    database: WorkerDb, monkeypatch: pytest.MonkeyPatch, min_runtime_s: str, limits: dict[str, bool]
) -> None:
    monkeypatch.setenv("TRAINYARD_PREEMPT_MIN_RUNTIME_S", min_runtime_s)
    get_settings.cache_clear()
    victim = running_on_every_gpu(database, limits=limits)
    urgent = database.add_job(database.spec(num_gpus=1), priority=10)
    assert claim_job(urgent).outcome is ClaimOutcome.WAITING
    assert database.job(victim).status == JobStatus.RUNNING
    assert claim_next() is None
    later = f"job {victim} (priority 0) can be preempted for it from "
    assert (later in (database.job(urgent).message or "")) is (min_runtime_s != "0")


def test_a_cpu_job_says_when_it_can_preempt(database: WorkerDb, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33 #7: a priority-60 job behind a priority-0 one that has not run its minimum says so."""
    monkeypatch.setenv("TRAINYARD_PREEMPT_MIN_RUNTIME_S", "600")
    report_cores(monkeypatch, 2)
    victim = database.add_job(database.spec(nproc_per_node=2, strategy="ddp"))
    assert claim_job(victim).outcome is ClaimOutcome.CLAIMED
    with session_scope() as session:
        move(session, victim, JobStatus.STARTING, JobStatus.RUNNING)
    urgent = database.add_job(database.spec(nproc_per_node=2, strategy="ddp"), priority=60)
    assert claim_job(urgent).outcome is ClaimOutcome.WAITING
    started = database.job(victim).started_at
    assert started is not None
    at = as_utc(started) + timedelta(seconds=600)
    assert database.job(urgent).message == (
        f"waiting for 2 CPU cores on {database.host}; job {victim} holds 2 of 2; job {victim} (priority 0) "
        f"can be preempted for it from {at:%H:%M:%S} UTC, once it has run TRAINYARD_PREEMPT_MIN_RUNTIME_S "
        "(600 s)"
    )

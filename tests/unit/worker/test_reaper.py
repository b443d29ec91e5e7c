"""Recovery without the broker's help: dead workers' jobs, lost doorbells, jobs that waited too long."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select

from core.config import get_settings
from core.db import session_scope
from core.models import GpuLease, Job, JobEvent, JobNode, Metric, Worker, utcnow
from core.states import JobStatus
from core.transitions import move
from jobspec.events import EVENTS_FILE, MetricsEvent, append_event
from tests.unit.conftest import enqueued
from worker.executors.local.kill import mark_for
from worker.executors.local.leases import claim_job, worker_id
from worker.executors.local.reaper import Rings, beat, reap

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


def later(seconds: float) -> datetime:
    return utcnow() + timedelta(seconds=seconds)


def events(job_id: int) -> list[tuple[str | None, str, str | None]]:
    with session_scope() as session:
        rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
        return [(e.from_status, e.to_status, e.reason) for e in rows]


def leased_jobs() -> list[int]:
    with session_scope() as session:
        return list(session.scalars(select(GpuLease.job_id)))


def test_expired_heartbeat_requeues_and_rings(database: WorkerDb, doorbell: Doorbell) -> None:
    lost = database.add_job(database.spec(gpus=[0]))
    alive = database.add_job(database.spec(gpus=[1]))
    claim_job(lost)
    claim_job(alive)
    with session_scope() as session:
        move(session, lost, JobStatus.STARTING, JobStatus.RUNNING)
    timeout = get_settings().lease_timeout_s
    with session_scope() as session:  # only `alive` heartbeats on, the job and its node
        session.get_one(Job, alive).heartbeat_at = later(timeout)
        session.get_one(JobNode, (alive, 0)).heartbeat_at = later(timeout)

    report = reap(Rings(), now=later(timeout + 1))

    assert report.requeued == [lost]
    job = database.job(lost)
    assert (job.status, job.status_reason) == (JobStatus.QUEUED, "worker_lost")
    assert events(lost)[-1] == ("running", "queued", "worker_lost")
    assert database.job(alive).status == JobStatus.STARTING
    assert leased_jobs() == [alive]
    assert doorbell.rung == [lost]
    # The next attempt claims it again, with a higher attempt number.
    assert claim_job(lost).attempt == 2


def test_expired_cancelling_job_is_cancelled(database: WorkerDb, doorbell: Doorbell) -> None:
    job_id = database.add_job(database.spec(gpus=[2]))
    claim_job(job_id)
    with session_scope() as session:
        move(session, job_id, JobStatus.STARTING, JobStatus.CANCELLING, reason="user")

    report = reap(Rings(), now=later(get_settings().lease_timeout_s + 1))

    assert report.cancelled == [job_id]
    assert database.job(job_id).status == JobStatus.CANCELLED
    assert events(job_id)[-1] == ("cancelling", "cancelled", "worker_lost")
    assert leased_jobs() == []
    assert doorbell.rung == []


def test_what_a_dead_worker_s_ranks_wrote_is_recorded_when_the_job_is_reaped(
    database: WorkerDb, doorbell: Doorbell
) -> None:
    """Its ranks trained on after their worker died; cancelled meanwhile, the job has no next attempt to
    catch their events up, so the reaper records them once it has stopped the ranks (the soak, issue 42)."""
    job_id = database.add_job(database.spec(gpus=[2]))
    claim_job(job_id)
    with session_scope() as session:
        move(session, job_id, JobStatus.STARTING, JobStatus.CANCELLING, reason="user")
    run_dir = mark_for(job_id, 1, get_settings().hostname, get_settings().runs_dir).run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    for step in (10, 20, 30):
        append_event(
            run_dir / EVENTS_FILE, MetricsEvent(step=step, total_steps=30, epoch=1, values={"loss": 1.0})
        )

    reap(Rings(), now=later(get_settings().lease_timeout_s + 1))

    assert database.job(job_id).status == JobStatus.CANCELLED
    with session_scope() as session:
        assert session.scalars(select(Metric.step).where(Metric.job_id == job_id)).all() == [10, 20, 30]


def test_a_reaper_killed_before_it_caught_up_leaves_that_to_the_next(
    database: WorkerDb, doorbell: Doorbell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reaper that requeued a job and died before it recorded what the lost attempt wrote: the job,
    cancelled while it waits requeued, has no next attempt, so the next reaper records it (the 60-minute
    soak on PostgreSQL lost two cancelled jobs' metrics this way, issue 42)."""
    job_id = database.add_job(database.spec(gpus=[2]))
    claim_job(job_id)
    run_dir = mark_for(job_id, 1, get_settings().hostname, get_settings().runs_dir).run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    for step in (10, 20):
        append_event(
            run_dir / EVENTS_FILE, MetricsEvent(step=step, total_steps=20, epoch=1, values={"loss": 1.0})
        )

    def killed(*_: object) -> None:
        raise SystemExit("the worker was killed here")

    monkeypatch.setattr("worker.executors.local.reaper.catch_up", killed)
    with pytest.raises(SystemExit):
        reap(Rings(), now=later(get_settings().lease_timeout_s + 1))
    monkeypatch.undo()
    assert database.job(job_id).status == JobStatus.QUEUED
    with session_scope() as session:  # the user cancels it while it waits
        move(session, job_id, JobStatus.QUEUED, JobStatus.CANCELLED, reason="cancelled")

    report = reap(Rings())

    assert report.cleared == [job_id]
    with session_scope() as session:
        assert session.scalars(select(Metric.step).where(Metric.job_id == job_id)).all() == [10, 20]
    assert reap(Rings()).cleared == []  # done once


def test_pending_timeout_fails_counting_from_the_last_requeue(database: WorkerDb, doorbell: Doorbell) -> None:
    limits = {"limits": {"max_pending_s": 60}}
    waiting = database.add_job({**database.spec(), **limits}, created_at=later(-61))
    requeued = database.add_job({**database.spec(), **limits}, created_at=later(-300))
    patient = database.add_job(database.spec(), created_at=later(-300))
    with session_scope() as session:  # `requeued` ran and was requeued a moment ago
        move(session, requeued, JobStatus.QUEUED, JobStatus.STARTING)
        move(session, requeued, JobStatus.STARTING, JobStatus.QUEUED, reason="worker_lost")

    report = reap(Rings())

    assert report.pending_timeouts == [waiting]
    job = database.job(waiting)
    assert (job.status, job.status_reason) == (JobStatus.FAILED, "pending_timeout")
    assert job.message == "waited in the queue past limits.max_pending_s=60"
    assert events(waiting) == [("queued", "failed", "pending_timeout")]
    assert database.job(requeued).status == JobStatus.QUEUED
    assert database.job(patient).status == JobStatus.QUEUED


def test_unclaimed_jobs_get_one_ring_for_the_queue(database: WorkerDb, doorbell: Doorbell) -> None:
    database.add_job(priority=0)  # older, but it starts second
    high = database.add_job(priority=9)
    rings = Rings()
    requeue_after = get_settings().requeue_after_s

    assert reap(rings).rung is None  # just created: their first doorbell is still on its way
    # One ring for the whole queue, named for the job that starts first: whoever it wakes claims in order.
    assert reap(rings, now=later(requeue_after + 1)).rung == high
    assert doorbell.rung == [high]
    doorbell.rung.clear()  # a worker took it, and could place neither
    assert reap(rings, now=later(requeue_after + 2)).rung is None  # this reaper rang a moment ago
    assert reap(rings, now=later(2 * requeue_after + 2)).rung == high
    assert reap(rings, now=later(3 * requeue_after + 3)).rung is None  # the last ring still waits
    assert doorbell.rung == [high]


def test_busy_workers_do_not_pile_up_rings_in_the_broker(database: WorkerDb) -> None:
    """Issue 22 #2: while every worker slot is busy, each queued job was rung again every requeue_after_s
    (300 jobs left 17,871 rings). Counted in the real embedded broker, which no worker takes from here."""
    settings = get_settings()
    jobs = [database.add_job(created_at=later(-60)) for _ in range(20)]
    rings = Rings()
    for cycle in range(5):
        reap(rings, now=later(cycle * (settings.requeue_after_s + 1)))
    assert enqueued(settings) == [jobs[0]]


def test_beat_upserts_this_worker(database: WorkerDb) -> None:
    beat()
    beat()
    with session_scope() as session:
        (worker,) = session.scalars(select(Worker)).all()
        assert (worker.id, worker.host) == (worker_id(), database.host)
        assert [gpu["index"] for gpu in worker.gpus] == database.gpus

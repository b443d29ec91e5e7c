"""Liveness and recovery: this worker's heartbeat row, and jobs whose worker died or whose doorbell was lost.

`reap` is plain code (no threads) so tests call it directly; `ReaperThread` runs it in each worker process.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psutil
from sqlalchemy import ColumnElement, and_, delete, or_, select, update
from sqlalchemy.exc import SQLAlchemyError

from core.clock import as_utc
from core.config import get_settings
from core.db import session_scope
from core.gpu_health import Faults, record_faults, stop_jobs_on_drained
from core.hosts import HOST_OP_S
from core.models import Job, JobEvent, JobNode, LostAttempt, Worker, utcnow
from core.states import JobStatus
from core.transitions import move, move_from_any
from worker.attempts.ends import OWNED, release_leases
from worker.attempts.events import catch_up
from worker.attempts.pending import fail_pending_timeouts
from worker.attempts.starting import worker_id
from worker.executors.local.host_probe import HostProbe
from worker.executors.local.kill import kill_job, mark_for
from worker.executors.local.leases import ring_waiting_jobs
from worker.gpus import gpu_faults, host_gpus
from worker.uploads import Uploads

log = logging.getLogger(__name__)


@dataclass
class ReapReport:
    requeued: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    pending_timeouts: list[int] = field(default_factory=list)
    rung: int | None = None  # the job the pass rang for
    cleared: list[int] = field(default_factory=list)  # lost attempts stopped and caught up here


@dataclass
class Rings:
    """What a reaper remembers between passes: when it last rang."""

    last: datetime | None = None


def beat(host_op_s: float | None = None) -> None:
    """Upsert this worker's row: who it is, where, what its GPUs look like now, with what an eager operation
    costs their host (host_probe.py; absent until probed), and its host's memory (what the API forecasts a
    CPU job against); judge its GPUs' health (core/gpu_health.py) and ask the jobs on a drained one to stop.
    A fake inventory has no NVML to read."""
    settings = get_settings()
    found = host_gpus(settings)
    probed = {} if host_op_s is None else {HOST_OP_S: host_op_s}
    gpus = [gpu.public() | probed for gpu in found]
    faults = {} if settings.gpu_inventory is not None else gpu_faults([gpu.index for gpu in found])
    with session_scope() as session:
        session.merge(
            Worker(
                id=worker_id(),
                host=settings.hostname,
                address=settings.advertise_address,
                gpus=gpus,
                cpus=len(os.sched_getaffinity(0)),  # the cores this worker may run on, not the machine's
                memory_mb=psutil.virtual_memory().total // 2**20,
                heartbeat_at=utcnow(),
            )
        )
    judge_gpus(settings.hostname, faults)


def judge_gpus(host: str, faults: dict[int, Faults]) -> None:
    """This host's GPUs judged from what NVML said, and the jobs on a drained one asked to stop: in a
    transaction of its own, after the heartbeat's, which must land whatever this one meets."""
    try:
        with session_scope() as session:
            record_faults(session, host, faults)
            stop_jobs_on_drained(session, host)
    except SQLAlchemyError:
        log.exception("could not judge the GPUs of %s this beat", host)


def _quiet_node(cutoff: datetime) -> ColumnElement[bool]:
    """A node of the job's attempt, still meant to run, whose host stopped heartbeating it."""
    return (
        select(JobNode.job_id)
        .where(
            JobNode.job_id == Job.id,
            JobNode.attempt == Job.attempt,
            JobNode.finished.is_(False),
            JobNode.heartbeat_at < cutoff,
        )
        .exists()
    )


def _expired(cutoff: datetime) -> ColumnElement[bool]:
    stale = or_(Job.heartbeat_at < cutoff, Job.heartbeat_at.is_(None), _quiet_node(cutoff))
    return and_(Job.status.in_(OWNED), stale)


def _recover(job_id: int, cutoff: datetime) -> JobStatus | None:
    """Requeue (or finish cancelling) one job whose heartbeat expired; the status it moved to, if it did."""
    with session_scope() as session:
        # Re-check the expiry with a write, which holds the row: a worker that was only slow and heartbeats
        # now keeps its job.
        still_expired = session.execute(
            update(Job).where(Job.id == job_id, _expired(cutoff)).values(heartbeat_at=Job.heartbeat_at)
        )
        if still_expired.rowcount != 1:  # type: ignore[attr-defined]
            return None
        job = session.get_one(Job, job_id, populate_existing=True)
        nodes = session.execute(
            select(JobNode.host, JobNode.heartbeat_at).where(
                JobNode.job_id == job_id, JobNode.attempt == job.attempt
            )
        ).all()
        quiet = sorted({host for host, beat in nodes if as_utc(beat) < cutoff})
        # Marked down until their worker beats again: the job must not be placed straight back on them.
        session.execute(update(Worker).where(Worker.host.in_(quiet)).values(heartbeat_at=cutoff))
        lost = (
            f"host {', '.join(quiet)} stopped heartbeating"
            if quiet
            else f"worker {job.worker_id} stopped heartbeating"
        )
        if job.status == JobStatus.CANCELLING:
            move(
                session, job_id, JobStatus.CANCELLING, JobStatus.CANCELLED, reason="worker_lost", message=lost
            )
            outcome = JobStatus.CANCELLED
        else:
            move_from_any(
                session,
                job_id,
                [JobStatus.RUNNING, JobStatus.STARTING, JobStatus.PREEMPTING],
                JobStatus.QUEUED,
                reason="worker_lost",
                message=f"{lost}; requeued to resume from its latest checkpoint",
            )
            outcome = JobStatus.QUEUED
        release_leases(session, job_id)
        hosts = {host for host, _ in nodes} | {job.host}
        # Its processes may have outlived their worker on each host: that host's reaper stops them and records
        # what they wrote (clear_lost_attempts), after this commit and never inside it.
        session.add_all(LostAttempt(job_id=job_id, attempt=job.attempt, host=host) for host in hosts if host)
    return outcome


def clear_lost_attempts(report: ReapReport) -> None:
    """Stop what lost attempts still run on this host and record what they wrote (metrics, checkpoints): a job
    cancelled meanwhile, or cancelled while it waits requeued, has no next attempt to catch it up. Each row
    goes once both are done; a reaper that dies halfway leaves it to the next pass, and re-reading is
    idempotent."""
    settings = get_settings()
    with session_scope() as session:
        lost = session.execute(
            select(LostAttempt.job_id, LostAttempt.attempt).where(LostAttempt.host == settings.hostname)
        ).all()
    for job_id, attempt in lost:
        mark = mark_for(job_id, attempt, settings.hostname, settings.runs_dir)
        kill_job(mark, settings.cancel_grace_s)
        with Uploads(job_id, mark.run_dir, launcher_log=True) as uploads:
            catch_up(job_id, mark.run_dir, uploads, settings)
        with session_scope() as session:
            session.execute(
                delete(LostAttempt).where(
                    LostAttempt.job_id == job_id,
                    LostAttempt.attempt == attempt,
                    LostAttempt.host == settings.hostname,
                )
            )
        report.cleared.append(job_id)


def recover_lost_jobs(now: datetime, report: ReapReport) -> None:
    cutoff = now - timedelta(seconds=get_settings().lease_timeout_s)
    with session_scope() as session:
        expired = list(session.scalars(select(Job.id).where(_expired(cutoff))))
    for job_id in expired:
        status = _recover(job_id, cutoff)
        if status is JobStatus.QUEUED:
            report.requeued.append(job_id)
        elif status is JobStatus.CANCELLED:
            report.cancelled.append(job_id)


def _unclaimed_since(cutoff: datetime) -> tuple[ColumnElement[bool], ...]:
    """A queued job that nothing has claimed since `cutoff`: queued before it, and not requeued after it."""
    requeued = (
        select(JobEvent.id)
        .where(JobEvent.job_id == Job.id, JobEvent.to_status == JobStatus.QUEUED, JobEvent.at > cutoff)
        .exists()
    )
    return Job.created_at <= cutoff, ~requeued


def ring_if_it_helps(now: datetime, rings: Rings, report: ReapReport) -> None:
    """At most one ring per pass: for jobs requeued by this pass, or, at most once per requeue_after_s, for
    a job that nothing has claimed for that long (its ring lost, or every slot busy).

    The bound: ring_waiting_jobs rings only while no ring waits in the shared queue, so the reapers add at
    most one waiting ring each, however many jobs are queued and however long they wait. One is enough:
    the worker it wakes claims the queue in start order and rings again for the rest."""
    cutoff = now - timedelta(seconds=get_settings().requeue_after_s)
    if report.requeued:
        report.rung = ring_waiting_jobs()
    elif rings.last is None or rings.last <= cutoff:
        report.rung = ring_waiting_jobs(*_unclaimed_since(cutoff))
    if report.rung is not None:
        rings.last = now


def reap(rings: Rings, now: datetime | None = None) -> ReapReport:
    """One pass; `rings` carries over between passes."""
    now = now or utcnow()
    report = ReapReport()
    recover_lost_jobs(now, report)
    clear_lost_attempts(report)
    report.pending_timeouts = fail_pending_timeouts(now)
    ring_if_it_helps(now, rings, report)
    if report.requeued or report.cancelled or report.pending_timeouts or report.cleared:
        log.info("reaped: %s", report)
    return report


class ReaperThread(threading.Thread):
    def __init__(self, probe: HostProbe) -> None:
        super().__init__(name="trainyard-reaper", daemon=True)
        self.halt = threading.Event()
        self.rings = Rings()
        self.probe = probe

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                beat(self.probe.op_s)
                reap(self.rings)
            except Exception:  # a bad pass (database away, broker away) must not end recovery for good
                log.exception("reaper pass failed")
            self.halt.wait(get_settings().heartbeat_s)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)

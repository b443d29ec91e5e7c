"""Supervising one launched job: tail its events, obey cancel and limits, record how it ended.

Its heartbeat (worker/executors/local/heartbeat.py) and its uploads (worker/uploads.py) run on threads of
their own, so this loop's work per tick is bounded: one batch of events, a few reads of the job's row, a poll
of the process."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy.exc import SQLAlchemyError

from core.config import get_settings
from core.db import session_scope
from core.doorbell import enqueue_job
from core.models import Job, utcnow
from core.states import JobStatus
from core.transitions import move
from jobspec.startup import Mark
from worker.attempts.deadline import look, past_deadline
from worker.attempts.ends import CANCELLED, Outcome, exit_outcome, finish, own, restarts_used
from worker.attempts.events import AttemptEvents
from worker.executors.local.disk import DiskLimit, DiskWatch
from worker.executors.local.kill import JobMark, kill_job
from worker.executors.local.leases import ring_waiting_jobs
from worker.executors.local.nodes import NodeTask, next_attempt_of_nodes, unfinished_after
from worker.executors.local.preempt import PREEMPTED_REASON
from worker.executors.local.warm.factory_handle import JobProcess, never_ran
from worker.tail import EventTail, add_marks
from worker.uploads import Uploads

log = logging.getLogger(__name__)

TICK_S = 0.5
# A sweep's trial under a pruner: every step run past the pruner's verdict is a step wasted on a trial the
# sweep gave up, and a tiny trial runs hundreds of steps in a tick.
PRUNED_TICK_S = 0.1

REQUEUED = Outcome(JobStatus.QUEUED, "worker_shutdown", "its worker shut down; requeued to resume elsewhere")
STANDBY_LOST = Outcome(
    JobStatus.QUEUED,
    "standby_lost",
    "the warm standby it was handed to was lost before it started it; requeued to start again",
)
PREEMPTED = Outcome(
    JobStatus.QUEUED,
    PREEMPTED_REASON,
    "stopped for a higher priority; requeued to resume from its checkpoint",
)


@dataclass
class RunningJob:
    job_id: int
    attempt: int
    mark: JobMark
    process: JobProcess
    tail: EventTail | None  # None on a node that leaves the shared events file to node 0
    started_at: datetime | None  # when the job was placed: spec.limits.max_runtime_s counts from there
    max_runtime_s: int | None
    max_restarts: int = 0
    node_rank: int = 0
    nnodes: int = 1
    max_disk: DiskLimit | None = None

    @property
    def node(self) -> NodeTask:
        return NodeTask(self.job_id, self.attempt, self.node_rank)


def begin_restart(job: RunningJob, outcome: Outcome) -> int | None:
    """running -> restarting -> starting as the next attempt, keeping the GPU leases, in one transaction;
    the new attempt, or None when no restart is left (or the job is no longer this attempt's)."""
    with session_scope() as session:
        if not own(session, job.job_id, job.attempt):
            return None
        used = restarts_used(session, job.job_id)
        if used >= job.max_restarts:
            return None
        restart = f"restart {used + 1} of limits.max_restarts={job.max_restarts}"
        now = utcnow()
        if not move(
            session,
            job.job_id,
            JobStatus.RUNNING,
            JobStatus.RESTARTING,
            reason=outcome.reason,
            message=f"{restart} after: {outcome.message}",
        ):
            return None
        move(
            session,
            job.job_id,
            JobStatus.RESTARTING,
            JobStatus.STARTING,
            reason="restart",
            message=f"{restart}: resuming from the latest checkpoint",
            attempt=job.attempt + 1,
            heartbeat_at=now,
            running_at=None,
        )
        # In place, the new attempt is queued and placed at once, on the GPUs it keeps.
        restarted = now.timestamp()
        add_marks(session.get_one(Job, job.job_id), {Mark.QUEUED: restarted, Mark.PLACED: restarted})
        next_attempt_of_nodes(session, job.job_id, job.attempt + 1)
    return job.attempt + 1


def last_node_done(job: RunningJob) -> bool:
    """Mark this node finished; True when it was the attempt's last, which then records the job's end."""
    if job.nnodes == 1:
        return True
    with session_scope() as session:
        # own() first: its write holds the job's row, so nodes finishing at once count one after the other.
        return own(session, job.job_id, job.attempt) and unfinished_after(session, job.node) == 0


def ring_others() -> None:
    try:
        ring_waiting_jobs()
    except Exception:  # the broker is down: the reaper rings queued jobs again later
        log.exception("could not ring the jobs waiting for GPUs")


class Supervisor:
    def __init__(self, job: RunningJob, uploads: Uploads, stop: threading.Event) -> None:
        self.job = job
        self.uploads = uploads
        self.stop = stop
        self.settings = get_settings()
        self.next_attempt: int | None = None
        self.disk = DiskWatch(job.mark.run_dir, job.max_disk)
        self.events = AttemptEvents(job.job_id, job.tail, uploads)  # node 0's; the others' read nothing

    def run(self) -> int | None:
        """Supervise until the attempt ends; the attempt to launch next when it ended in a restart."""
        try:
            tick_s = TICK_S if self.events.pruning is None else PRUNED_TICK_S
            with self.disk:
                while not self._tick():
                    self.stop.wait(tick_s)
            return self.next_attempt
        except BaseException:
            # Never leave training running unsupervised; the reaper requeues the job once its heartbeat ages.
            self._stop_processes(self.settings.cancel_grace_s)
            raise

    def _tick(self) -> bool:
        """One look at the job; True once this supervisor is done with it."""
        job = self.job
        try:
            self.events.pump()
            seen = look(job)
            if seen is None:
                log.warning("job %s attempt %s is no longer ours; stopping it", job.job_id, job.attempt)
                self._stop_processes(self.settings.cancel_grace_s)
                return True
            if self.stop.is_set():
                return self._end(REQUEUED)
            if seen.status is JobStatus.CANCELLING:
                return self._end(CANCELLED)
            if seen.status is JobStatus.PREEMPTING:
                # One that finished meanwhile keeps its success rather than running again.
                done = job.process.poll() == 0
                return self._end(exit_outcome(job.mark.run_dir, 0) if done else PREEMPTED)
            if (stop := self.events.pruned() or past_deadline(seen, job)) is not None:
                return self._end(stop)
            if (full := self.disk.exceeded()) is not None:
                return self._end(Outcome(JobStatus.FAILED, "disk_limit", full))
            code = job.process.poll()
            if code is not None:
                return self._end(
                    STANDBY_LOST if never_ran(job.process) else exit_outcome(job.mark.run_dir, code)
                )
        except SQLAlchemyError:
            # A locked or unreachable database: keep the job running and try again next tick.
            log.exception("job %s: database error while supervising", job.job_id)
        return False

    def _stop_processes(self, grace_s: float) -> None:
        process = self.job.process
        kill_job(self.job.mark, grace_s, group=None if never_ran(process) else process.pid)
        self.job.process.wait()

    def _end(self, outcome: Outcome) -> bool:
        """Stop what is left, catch the last events, record the outcome; retried next tick if the DB fails."""
        job = self.job
        # A preempted job's ranks need the time to reach their next report step and checkpoint there; one
        # still short of it then is killed and resumes from its checkpoint before.
        preempted = outcome is PREEMPTED
        self._stop_processes(self.settings.preempt_grace_s if preempted else self.settings.cancel_grace_s)
        self.events.pump(drain=True)  # the checkpoints written up to the end, which a restart resumes from
        # Stored before the job is seen to end: a restart resumes from the newest checkpoint, and a reader's
        # eof means the full log. The heartbeat goes on meanwhile.
        self.uploads.settle(self.settings.upload_drain_s)
        if outcome.retryable:
            self.next_attempt = begin_restart(job, outcome)
            if self.next_attempt is not None:
                log.info("job %s attempt %s: restarting (%s)", job.job_id, job.attempt, outcome.reason)
                return True
            if job.max_restarts:
                used_up = f"all {job.max_restarts} restarts used"
                outcome = replace(outcome, message=f"{outcome.message} ({used_up})")
        if not_stored := self.uploads.close():
            log.warning("job %s attempt %s: not stored: %s", job.job_id, job.attempt, not_stored)
            wait = f"uploads wait up to TRAINYARD_UPLOAD_DRAIN_S={self.settings.upload_drain_s:g} s"
            late = f"not in the object store when it ended: {', '.join(not_stored)} ({wait})"
            outcome = replace(outcome, message=f"{outcome.message}; {late}")
        if outcome.status is JobStatus.SUCCEEDED and not last_node_done(job):
            log.info(
                "job %s attempt %s: node %s done, others still run", job.job_id, job.attempt, job.node_rank
            )
            return True
        if not finish(job.job_id, job.attempt, outcome):
            return True
        log.info("job %s attempt %s: %s (%s)", job.job_id, job.attempt, outcome.status, outcome.reason)
        if outcome.status is JobStatus.QUEUED:
            try:
                enqueue_job(job.job_id)
            except Exception:  # the reaper re-rings queued jobs
                log.exception("could not re-enqueue job %s", job.job_id)
        ring_others()
        return True

"""Supervising one launched job: tail its events, obey cancel and limits, record how it ended. What every
executor decides alike (cancel, pruning, the runtime limit, settling, restart or end) is
worker/attempts/watch.py's; this loop adds the local executor's own: its worker's shutdown, a preemption,
the disk limit and a multi-node job's other nodes.

Its heartbeat (worker/executors/local/heartbeat.py) and its uploads (worker/uploads.py) run on threads of
their own, so this loop's work per tick is bounded: one batch of events, a few reads of the job's row, a poll
of the process."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from core.config import get_settings
from core.db import session_scope
from core.doorbell import enqueue_job
from core.gpu_health import GPU_DRAINED, note_device_error
from core.models import Job, JobNode, utcnow
from core.states import JobStatus
from core.transitions import move
from jobspec.startup import Mark
from worker.attempts.deadline import look
from worker.attempts.ends import STALLED, Outcome, exit_outcome, own, release_leases, to_restarting
from worker.attempts.events import AttemptEvents
from worker.attempts.stack_capture import RankPid
from worker.attempts.watch import must_stop, record_end, wind_up
from worker.executors.local.disk import DiskLimit, DiskWatch
from worker.executors.local.kill import JobMark, kill_job
from worker.executors.local.leases import ring_waiting_jobs
from worker.executors.local.nodes import NodeTask, next_attempt_of_nodes, unfinished_after
from worker.executors.local.preempt import PREEMPTED_REASON
from worker.executors.local.stack_signal import signal_ranks
from worker.executors.local.warm.factory_handle import JobProcess, never_ran
from worker.failure import FailureKind
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
DRAINED_OFF = Outcome(
    JobStatus.QUEUED,
    GPU_DRAINED,
    "stopped because a GPU it ran on was drained; requeued to resume from its checkpoint on other GPUs",
)
# What a job asked to stop (preempting) ends as, by why it was asked.
ASKED_TO_STOP = {PREEMPTED_REASON: PREEMPTED, GPU_DRAINED: DRAINED_OFF}


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
    secret_values: tuple[str, ...] = ()  # what its ranks were given (memory only), masked where it is quoted

    @property
    def node(self) -> NodeTask:
        return NodeTask(self.job_id, self.attempt, self.node_rank)


@dataclass(frozen=True)
class Restarted:
    attempt: int | None  # the next attempt, launched here in place; None: requeued, to be placed elsewhere


def _device_errors(session: Session, job: RunningJob) -> list[int]:
    """Note a device error on this node's GPUs; those the job has now failed on twice (core/gpu_health.py)."""
    node = session.get(JobNode, (job.job_id, job.node_rank))
    return [] if node is None else note_device_error(session, job.job_id, node.host, node.gpu_ids)


def begin_restart(job: RunningJob, outcome: Outcome) -> Restarted | None:
    """running -> restarting -> starting as the next attempt, keeping the GPU leases, in one transaction; or,
    after a device error on GPUs the job has now failed on twice, -> queued without its leases, to be placed
    on others. None when no restart is left (or the job is no longer this attempt's)."""
    with session_scope() as session:
        if not own(session, job.job_id, job.attempt):
            return None
        faulty = _device_errors(session, job) if outcome.reason == FailureKind.DEVICE else []
        restart = to_restarting(session, job.job_id, job.max_restarts, outcome)
        if restart is None:
            return None
        if faulty:
            gpus = ", ".join(str(gpu) for gpu in faulty)
            elsewhere = f"GPU {gpus} failed it twice with device errors; requeued to resume on other GPUs"
            move(
                session,
                job.job_id,
                JobStatus.RESTARTING,
                JobStatus.QUEUED,
                reason="restart",
                message=f"{restart}: {elsewhere} from the latest checkpoint",
            )
            release_leases(session, job.job_id)
            return Restarted(None)
        now = utcnow()
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
    return Restarted(job.attempt + 1)


class LocalAttempt:
    """This node's attempt as the shared decisions see it (worker/attempts/watch.py's RunningAttempt): its
    torchrun here, stopped and restarted in place."""

    def __init__(self, job: RunningJob, events: AttemptEvents) -> None:
        self.job = job
        self.events = events
        # What the shared decisions read of the attempt, fixed for its life.
        self.job_id, self.attempt, self.started_at = job.job_id, job.attempt, job.started_at
        self.max_runtime_s, self.max_restarts = job.max_runtime_s, job.max_restarts
        self.secret_values = job.secret_values
        self.next_attempt: int | None = None  # set when it restarted in place
        self.requeued = False  # it restarted by going back to the queue

    def ended(self) -> Outcome | None:
        """Its torchrun's exit, judged from what its ranks left; a job whose standby was lost before it
        started it never ran, and starts again."""
        process = self.job.process
        code = process.poll()
        if code is None:
            return None
        if never_ran(process):
            return STANDBY_LOST
        return exit_outcome(self.job.mark.run_dir, code, self.secret_values)

    def stop(self, outcome: Outcome) -> None:
        """Stop its processes before returning. A preempted job's ranks need the time to reach their next
        report step and checkpoint there; one still short of it then is killed and resumes from its
        checkpoint before."""
        settings = get_settings()
        if outcome.reason == STALLED:  # ranks stuck in a collective reach no checkpoint: none is waited for
            self.kill(0.0)
            return
        asked = outcome in ASKED_TO_STOP.values()
        self.kill(settings.preempt_grace_s if asked else settings.cancel_grace_s)

    def kill(self, grace_s: float) -> None:
        process = self.job.process
        kill_job(self.job.mark, grace_s, group=None if never_ran(process) else process.pid)
        process.wait()

    def restart(self, outcome: Outcome) -> bool:
        restarted = begin_restart(self.job, outcome)
        if restarted is None:
            return False
        self.next_attempt, self.requeued = restarted.attempt, restarted.attempt is None
        return True

    def signal_ranks(self, ranks: dict[int, RankPid]) -> list[int]:
        return signal_ranks(self.job.mark, ranks)


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
    def __init__(self, job: RunningJob, uploads: Uploads, shutdown: threading.Event) -> None:
        self.job = job
        self.shutdown = shutdown
        self.settings = get_settings()
        self.disk = DiskWatch(job.mark.run_dir, job.max_disk)
        # Node 0's events; the others' read nothing.
        self.attempt = LocalAttempt(job, AttemptEvents(job.job_id, job.tail, uploads))

    def run(self) -> int | None:
        """Supervise until the attempt ends; the attempt to launch next when it ended in a restart."""
        try:
            tick_s = TICK_S if self.attempt.events.pruning is None else PRUNED_TICK_S
            with self.disk:
                while not self._tick():
                    self.shutdown.wait(tick_s)
            return self.attempt.next_attempt
        except BaseException:
            # Never leave training running unsupervised; the reaper requeues the job once its heartbeat ages.
            self.attempt.kill(self.settings.cancel_grace_s)
            raise

    def _tick(self) -> bool:
        """One look at the job; True once this supervisor is done with it."""
        attempt = self.attempt
        try:
            attempt.events.pump()
            seen = look(attempt)
            if seen is None:
                log.warning(
                    "job %s attempt %s is no longer ours; stopping it", attempt.job_id, attempt.attempt
                )
                attempt.kill(self.settings.cancel_grace_s)
                return True
            if self.shutdown.is_set():
                return self._end(REQUEUED)
            if seen.status is JobStatus.PREEMPTING:
                # One that finished meanwhile keeps its success rather than running again.
                ended = attempt.ended()
                asked = ASKED_TO_STOP.get(seen.reason or "", PREEMPTED)
                return self._end(
                    ended if ended is not None and ended.status is JobStatus.SUCCEEDED else asked
                )
            if (stop := must_stop(attempt, seen)) is not None:
                return self._end(stop)
            if (full := self.disk.exceeded()) is not None:
                return self._end(Outcome(JobStatus.FAILED, "disk_limit", full))
            if (ended := attempt.ended()) is not None:
                return self._end(ended)
        except SQLAlchemyError:
            # A locked or unreachable database: keep the job running and try again next tick.
            log.exception("job %s: database error while supervising", attempt.job_id)
        return False

    def _end(self, outcome: Outcome) -> bool:
        """Stop what is left, settle, then restart or record the outcome; retried next tick if SQL fails."""
        job = self.job
        self.attempt.stop(outcome)
        final = wind_up(self.attempt, outcome, self.settings)
        if final is None:  # restarted: run() hands back the next attempt, or it went back to the queue
            if self.attempt.requeued:
                self._requeued()
            return True
        if final.status is JobStatus.SUCCEEDED and not last_node_done(job):
            log.info(
                "job %s attempt %s: node %s done, others still run", job.job_id, job.attempt, job.node_rank
            )
            return True
        if not record_end(self.attempt, final):
            return True
        if final.status is JobStatus.QUEUED:
            self._requeued()
        else:
            ring_others()
        return True

    def _requeued(self) -> None:
        try:
            enqueue_job(self.job.job_id)
        except Exception:  # the reaper re-rings queued jobs
            log.exception("could not re-enqueue job %s", self.job.job_id)
        ring_others()

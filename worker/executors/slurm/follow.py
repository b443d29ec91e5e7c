"""The Slurm executor's one thread in the worker on the login node: each tick it submits the queued jobs
Slurm has not seen, reads every job's Slurm state in one `scontrol` call, and moves each Trainyard job to
match, tailing the events of those that run through the same pieces as the local executor (worker/attempts/).

Nothing here places a job or orders the queue: Slurm does (its priority, fair share and preemption)."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from sqlalchemy import Row, case, select, update
from sqlalchemy.exc import SQLAlchemyError

from core.config import get_settings
from core.db import session_scope
from core.models import Job, utcnow
from core.slurm_script import BATCH_LOG, nice, slurm_folder
from core.states import TERMINAL, JobStatus
from jobspec.spec import JobSpec
from worker.attempts.deadline import look
from worker.attempts.ends import Outcome, finish
from worker.attempts.events import AttemptEvents, catch_up
from worker.attempts.pending import fail_pending_timeouts
from worker.attempts.watch import must_stop, record_end, settle, wind_up
from worker.executors.slurm import commands, endings, outcomes
from worker.executors.slurm.commands import SlurmError, SlurmJob
from worker.executors.slurm.drains import NodeDrains
from worker.executors.slurm.followed import Followed
from worker.executors.slurm.handover import (
    SLURM_PENDING,
    pending_message,
    slurm_runs,
    submit_queued,
    write_for_nodes,
)
from worker.uploads import Uploads

log = logging.getLogger(__name__)

# What each tick reads of a followed job.
ROW = (
    *(Job.id, Job.status, Job.slurm_job_id, Job.attempt, Job.slurm_restarts),
    *(Job.spec, Job.priority, Job.message, Job.waiting_on),
)
FOLLOWED = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING)


class Follower(threading.Thread):
    def __init__(self, stop: threading.Event) -> None:
        super().__init__(name="slurm-follower", daemon=True)
        self.stop = stop
        self.wake = threading.Event()  # a doorbell: a job was queued
        self.settings = get_settings()
        self.followed: dict[int, Followed] = {}
        self.pending_checked = 0.0
        self.drains = NodeDrains()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.tick()
            except (SlurmError, SQLAlchemyError):
                log.exception("slurm: this look failed; the next one tries again")
            self.wake.wait(self.settings.slurm_poll_s)
            self.wake.clear()
        for followed in self.followed.values():  # the jobs run on in Slurm; a new worker follows them again
            followed.events.uploads.close()

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.pending_checked >= self.settings.heartbeat_s:
            # limits.max_pending_s, at the local reaper's pace; the Slurm job of a job failed so is cancelled
            # below with the other strays. Drained GPUs' nodes, drained in Slurm, at the same pace.
            fail_pending_timeouts(utcnow())
            self.drains.reconcile()
            self.pending_checked = now
        submit_queued(self.settings)
        slurm = commands.show_jobs()
        with session_scope() as session:
            rows = session.execute(
                select(*ROW).where(Job.slurm_job_id.is_not(None), Job.status.in_(FOLLOWED))
            ).all()
        for row in rows:
            self._follow(row, slurm.get(row.slurm_job_id))
        self._cancel_strays(slurm)
        if self.followed:
            with session_scope() as session:
                session.execute(update(Job).where(Job.id.in_(self.followed)).values(heartbeat_at=utcnow()))

    def _follow(self, row: Row, slurm: SlurmJob | None) -> None:
        if row.status == JobStatus.QUEUED:
            if row.waiting_on and (slurm is None or slurm.state not in outcomes.WAITING):
                # Slurm judged its depends_on (afterok) before Trainyard settled them: Trainyard's judgment
                # decides. Released, it starts at a later tick, its nodes waiting for the attempt; cancelled
                # (dependency_failed), its Slurm job, if still live, is cancelled with the strays.
                return
            if slurm is None:
                lost = f"Slurm no longer knows job {row.slurm_job_id}"
                endings.end_waiting(row.id, Outcome(JobStatus.FAILED, "slurm_lost", lost))
            elif slurm.state in outcomes.WAITING:
                if row.message != pending_message(slurm):  # a write only when Slurm's reason changed
                    self._waiting(row.id, slurm)
                if slurm.nice != nice(row.priority):  # PATCHed since it was submitted
                    commands.set_nice(slurm.job_id, nice(row.priority))
            elif slurm.state == "CANCELLED":  # no attempt was handed to its nodes: nothing of it ran
                endings.end_waiting(row.id, outcomes.cancelled(slurm))
            elif slurm.state in outcomes.STARTED or slurm.state in outcomes.ENDED:
                self._start(row, slurm)
            return
        followed = self.followed.get(row.id) or self._follow_again(row, slurm)
        followed.slurm = slurm
        followed.events.pump()
        if slurm is not None and (slurm.restarts > followed.restarts or slurm.state in outcomes.WAITING):
            self._requeued(followed, slurm)
        elif (outcome := followed.ended()) is not None:
            self._end(followed, outcome)
        else:
            self._watch(followed)

    def _waiting(self, job_id: int, slurm: SlurmJob) -> None:
        """Slurm's reason (Resources, Priority, QOS...) as the queue's message, written when it changes; a
        job Slurm or Trainyard requeued keeps that as its reason."""
        message = pending_message(slurm)
        requeued = Job.status_reason.in_([endings.REQUEUED_REASON, endings.RESTART_REASON])
        reason = case((requeued, Job.status_reason), else_=SLURM_PENDING)
        with session_scope() as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id, Job.status == JobStatus.QUEUED, Job.message != message)
                .values(status_reason=reason, message=message)
            )

    def _start(self, row: Row, slurm: SlurmJob) -> None:
        attempt = slurm_runs(row.id, slurm)
        if attempt is None:
            return
        try:
            started = write_for_nodes(row.id, attempt, slurm.restarts, self.settings)
        except Exception as exc:  # its bundle, its checkpoint: nothing the nodes could run
            log.exception("job %s: could not start attempt %s", row.id, attempt)
            commands.cancel(slurm.job_id)
            finish(row.id, attempt, Outcome(JobStatus.FAILED, "launch_error", str(exc)))
            return
        self.followed[row.id] = self._followed(
            row, slurm, slurm.job_id, attempt, slurm.restarts, started.run_dir
        )
        log.info("job %s: attempt %s runs as Slurm job %s", row.id, attempt, slurm.job_id)

    def _followed(
        self, row: Row, slurm: SlurmJob | None, slurm_id: int, attempt: int, restarts: int, run_dir: Path
    ) -> Followed:
        closing = ExitStack()
        uploads = closing.enter_context(Uploads(row.id, run_dir, launcher_log=True))
        limits = JobSpec.model_validate(row.spec).limits
        with session_scope() as session:
            started_at = session.scalar(select(Job.started_at).where(Job.id == row.id))
        return Followed(
            job_id=row.id,
            slurm_id=slurm_id,
            attempt=attempt,
            restarts=restarts,
            run_dir=run_dir,
            batch_log=slurm_folder(self.settings.runs_dir, row.id) / BATCH_LOG,
            events=AttemptEvents(row.id, catch_up(row.id, run_dir, uploads, self.settings), uploads),
            uploads=closing,
            started_at=started_at,
            max_runtime_s=limits.max_runtime_s,
            max_restarts=limits.max_restarts,
            slurm=slurm,
        )

    def _follow_again(self, row: Row, slurm: SlurmJob | None) -> Followed:
        """A job this worker did not start (it restarted): follow it from where its events are."""
        run_dir = self.settings.runs_dir / str(row.id)
        restarts = row.slurm_restarts or 0
        followed = self._followed(row, slurm, row.slurm_job_id, row.attempt, restarts, run_dir)
        self.followed[row.id] = followed
        return followed

    def _watch(self, followed: Followed) -> None:
        """A running attempt: cancel, pruning and the runtime limit ask its ranks to stop (SIGTERM, and
        their final checkpoint); past cancel_grace_s, Slurm kills what is left."""
        if followed.stopping is not None:
            followed.kill_after(self.settings.cancel_grace_s)
            return
        seen = look(followed)
        if seen is not None and (stop := must_stop(followed, seen)) is not None:
            followed.stop(stop)

    def _requeued(self, followed: Followed, slurm: SlurmJob) -> None:
        settle(followed, self.settings)
        self._forget(followed)
        endings.requeued(followed.job_id, slurm)

    def _end(self, followed: Followed, outcome: Outcome) -> None:
        final = wind_up(followed, outcome, self.settings)
        self._forget(followed)
        if final is not None:
            record_end(followed, final)

    def _forget(self, followed: Followed) -> None:
        """Its uploads closed (a restart's next attempt has its own) and no longer followed."""
        followed.uploads.close()
        self.followed.pop(followed.job_id, None)

    def _cancel_strays(self, slurm: dict[int, SlurmJob]) -> None:
        """Slurm jobs still waiting or running whose Trainyard job has ended (cancelled while queued)."""
        live = [job.job_id for job in slurm.values() if job.state not in outcomes.ENDED]
        if not live:
            return
        with session_scope() as session:
            strays = session.scalars(
                select(Job.slurm_job_id).where(Job.slurm_job_id.in_(live), Job.status.in_(TERMINAL))
            ).all()
        for slurm_id in strays:
            if slurm_id is not None:
                commands.cancel(slurm_id)


_follower: list[Follower] = []


def follower(stop: threading.Event) -> Follower:
    """The worker's one follower, started on first use."""
    if not _follower:
        _follower.append(Follower(stop))
        _follower[0].start()
    return _follower[0]


def ring() -> None:
    """A job was queued: look now rather than at the next tick."""
    if _follower:
        _follower[0].wake.set()

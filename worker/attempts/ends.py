"""How an attempt ends in SQL, whichever executor ran it: the outcome, its move and the release of its GPUs
in one transaction, guarded so that only the attempt that owns the job ends it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from core.db import session_scope
from core.models import GpuLease, Job, JobEvent, utcnow
from core.states import JobStatus
from core.transitions import move, move_from_any
from worker.failure import classify_failure, root_cause

# The states in which a job's current attempt belongs to the worker that started it.
OWNED = (JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING, JobStatus.PREEMPTING)


@dataclass(frozen=True)
class Outcome:
    status: JobStatus
    reason: str
    message: str
    retryable: bool = False  # a failure a restart from the latest checkpoint may get past


CANCELLED = Outcome(JobStatus.CANCELLED, "cancelled", "cancelled on request; its processes were stopped")
# Its step counter stood still past limits.stall_timeout_s (worker/attempts/stall.py): retryable, as a hang
# (a peer lost in a data loader, a collective a rank skipped) may well not come back after a restart.
STALLED = "stalled"


def own(session: Session, job_id: int, attempt: int) -> bool:
    """Heartbeat the job if this attempt still owns it; the write also locks the row for the rest of the
    transaction (SQLite: the database), so a reaper or a cancel cannot slip in between check and change."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.status.in_(OWNED))
        .values(heartbeat_at=utcnow())
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def exit_outcome(run_dir: Path, code: int, secrets: Sequence[str] = ()) -> Outcome:
    """How an attempt whose processes exited with `code` ended, from what its ranks left in the run
    directory, the values of `secrets` masked in what it quotes of them."""
    if code == 0:
        return Outcome(JobStatus.SUCCEEDED, "completed", "training finished")
    kind = classify_failure(run_dir, code)
    return Outcome(JobStatus.FAILED, kind, root_cause(run_dir, code, secrets), retryable=kind.retryable)


def finish(job_id: int, attempt: int, outcome: Outcome) -> bool:
    """Record the end of this attempt and free its GPUs on every host in one transaction; False if it was not
    ours, or if a cancel on request found it not being cancelled (a repeated message: nothing moves then)."""
    with session_scope() as session:
        if not own(session, job_id, attempt):
            return False
        # A cancel on request wins over however the processes ended meanwhile, and ends nothing else.
        on_request = outcome.status is JobStatus.CANCELLED and outcome.reason == CANCELLED.reason
        moved = end_cancel(session, job_id) or (not on_request and end_as(session, job_id, outcome))
        if moved:
            release_leases(session, job_id)
    return moved


def end_as(session: Session, job_id: int, outcome: Outcome) -> bool:
    """An attempt that runs, ended as the outcome says. One cancelled from outside (Slurm's scancel) passes
    through cancelling, as every cancel of a started job does, in the same transaction."""
    said = {"reason": outcome.reason, "message": outcome.message}
    to = JobStatus.CANCELLING if outcome.status is JobStatus.CANCELLED else outcome.status
    ends = [JobStatus.RUNNING, JobStatus.STARTING, JobStatus.PREEMPTING]
    if move_from_any(session, job_id, ends, to, **said) is None:
        return False
    return to is outcome.status or move(session, job_id, to, outcome.status, **said)


def end_cancel(session: Session, job_id: int) -> bool:
    """cancelling -> cancelled, once the job's processes are gone; False when it was not being cancelled."""
    return move(
        session,
        job_id,
        JobStatus.CANCELLING,
        JobStatus.CANCELLED,
        reason=CANCELLED.reason,
        message=CANCELLED.message,
    )


def restarts_used(session: Session, job_id: int) -> int:
    query = select(func.count()).where(JobEvent.job_id == job_id, JobEvent.to_status == JobStatus.RESTARTING)
    return session.scalar(query) or 0


def to_restarting(session: Session, job_id: int, max_restarts: int, outcome: Outcome) -> str | None:
    """running -> restarting after a retryable failure, while limits.max_restarts allows one more; what this
    restart is called ("restart 2 of limits.max_restarts=3"), for the executor's next move, or None when
    none is left (or the job no longer runs)."""
    used = restarts_used(session, job_id)
    if used >= max_restarts:
        return None
    restart = f"restart {used + 1} of limits.max_restarts={max_restarts}"
    said = f"{restart} after: {outcome.message}"
    if not move(
        session, job_id, JobStatus.RUNNING, JobStatus.RESTARTING, reason=outcome.reason, message=said
    ):
        return None
    return restart


def release_leases(session: Session, job_id: int) -> None:
    """Every host's GPUs of the job: its nodes start and end together. An executor whose scheduler places
    jobs leases none, and this deletes nothing."""
    session.execute(delete(GpuLease).where(GpuLease.job_id == job_id))

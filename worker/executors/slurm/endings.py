"""How a Slurm job's attempt ends in SQL when Slurm, not its ranks, decides: requeued by Slurm, restarted
by Trainyard within limits.max_restarts, forgotten by slurmctld, or cancelled in Slurm's queue."""

from __future__ import annotations

from core.db import session_scope
from core.states import JobStatus
from core.transitions import move, move_from_any
from worker.attempts.ends import Outcome, end_cancel, to_restarting
from worker.executors.slurm import commands
from worker.executors.slurm.commands import SlurmJob

REQUEUED_REASON = "slurm_requeued"
RESTART_REASON = "restart"


def requeued(job_id: int, slurm: SlurmJob) -> None:
    """Slurm put the job back in its queue (a node failed, a preemption): queued again, to resume from its
    latest checkpoint when Slurm starts it; one being cancelled is cancelled instead."""
    with session_scope() as session:
        if end_cancel(session, job_id):
            commands.cancel(slurm.job_id)
            return
        why = f"Slurm requeued job {slurm.job_id} (restart {slurm.restarts}, {slurm.reason})"
        move_from_any(
            session,
            job_id,
            [JobStatus.STARTING, JobStatus.RUNNING],
            JobStatus.QUEUED,
            reason=REQUEUED_REASON,
            message=f"{why}; it resumes from its latest checkpoint when it starts again",
        )


def restart(job_id: int, slurm_id: int, max_restarts: int, outcome: Outcome) -> bool:
    """running -> restarting -> queued, and Slurm runs the same script again (scontrol requeue), within
    limits.max_restarts; False when none is left."""
    with session_scope() as session:
        restart = to_restarting(session, job_id, max_restarts, outcome)
        if restart is None:
            return False
        commands.requeue(slurm_id)
        move(
            session,
            job_id,
            JobStatus.RESTARTING,
            JobStatus.QUEUED,
            reason=RESTART_REASON,
            message=f"{restart}: Slurm runs it again, from the latest checkpoint",
        )
    return True


def end_waiting(job_id: int, outcome: Outcome) -> None:
    """A queued job none of whose attempts runs, ended: Slurm refused it, slurmctld no longer holds it, or it
    was cancelled in Slurm's queue."""
    with session_scope() as session:
        move(
            session, job_id, JobStatus.QUEUED, outcome.status, reason=outcome.reason, message=outcome.message
        )

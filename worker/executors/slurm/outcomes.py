"""What a Slurm job's state means for the Trainyard job: still waiting, running, or ended and how.

The ranks write the same run directory as local ones, so an exit is classified as locally
(worker/attempts/ends.py::exit_outcome); Slurm's own ends (its time limit, a node lost, its memory limit)
are named as such."""

from __future__ import annotations

from pathlib import Path

from core.states import JobStatus
from jobspec.files import JobFileError, open_job_file
from worker.attempts.ends import Outcome, exit_outcome
from worker.executors.slurm import commands
from worker.executors.slurm.attempts import node_error_mark
from worker.executors.slurm.commands import SlurmJob

# Slurm's states (squeue(1), "JOB STATE CODES") that wait for nodes, whether first or after a requeue.
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
ENDED = frozenset(
    {
        *("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL"),
        *("DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"),
    }
)
# Nodes allocated and the script started or starting: an attempt begins. The rest (COMPLETING, SUSPENDED,
# SIGNALING, STAGE_OUT, ...) hold nodes too: an attempt that runs goes on, but none begins there (a requeued
# job is COMPLETING on its old nodes before it is PENDING again).
STARTED = frozenset({"RUNNING", "CONFIGURING"})
BATCH_LOG_TAIL_BYTES = 64 * 1024
SLURM_CANCELLED = "slurm_cancelled"


def node_error(batch_log: Path, restarts: int) -> str | None:
    """The last error a node's task (node.py) wrote to the batch log, if any; the log lies in the job's Slurm
    folder, which no rank can write, and is read with bounds all the same."""
    try:
        with open_job_file(batch_log.parent, batch_log.name, None) as opened:
            opened.file.seek(max(0, opened.size - BATCH_LOG_TAIL_BYTES))
            text = opened.file.read(BATCH_LOG_TAIL_BYTES).decode("utf-8", errors="replace")
    except (JobFileError, OSError):
        return None
    mark = node_error_mark(restarts)
    errors = [line.split(mark, 1)[1] for line in text.splitlines() if mark in line]
    return errors[-1] if errors else None


def cancelled(job: SlurmJob) -> Outcome:
    """Cancelled in Slurm, not by Trainyard (the follower ends its own cancels as asked): an scancel by the
    cluster's user or an admin, or slurmctld itself."""
    return Outcome(
        JobStatus.CANCELLED, SLURM_CANCELLED, cancel_message(job, commands.cancelled_by(job.job_id))
    )


def cancel_message(job: SlurmJob, by: str | None) -> str:
    """Who cancelled the job and why, as far as Slurm says."""
    who = (
        f"by {by}, outside Trainyard" if by else "outside Trainyard (Slurm names who only in sacct's records)"
    )
    why = "" if job.reason == "None" else f"; Slurm's reason: {job.reason}"
    return f"Slurm job {job.job_id} CANCELLED {who}{why}"


def ended(job: SlurmJob, run_dir: Path, batch_log: Path) -> Outcome:
    """How a job Slurm reports ended, ended."""
    said = f"Slurm job {job.job_id} {job.state}"
    if job.state == "TIMEOUT" or job.state == "DEADLINE":
        return Outcome(JobStatus.TIMED_OUT, "max_runtime", f"{said}: it ran past Slurm's time limit")
    if job.state == "CANCELLED":
        return cancelled(job)
    if job.state in ("NODE_FAIL", "PREEMPTED", "BOOT_FAIL"):
        return Outcome(JobStatus.FAILED, job.state.lower(), f"{said}, and was not requeued", retryable=True)
    if job.state == "OUT_OF_MEMORY":
        # As the kernel's OOM killer locally: a rank killed by a signal, which a restart may get past.
        crash = exit_outcome(run_dir, -9)
        return Outcome(JobStatus.FAILED, "out_of_memory", f"{said}: {crash.message}", retryable=True)
    if job.exit_code == 0 and job.state == "COMPLETED":
        return exit_outcome(run_dir, 0)
    if (error := node_error(batch_log, job.restarts)) is not None:
        return Outcome(JobStatus.FAILED, "launch_error", f"{said}: {error}")
    return exit_outcome(run_dir, job.exit_code or 1)

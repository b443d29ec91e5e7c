"""Job states and the transitions between them (see DESIGN.md)."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    RESTARTING = "restarting"
    PREEMPTING = "preempting"  # asked to stop for a higher priority; requeued once it has
    PRUNED = "pruned"  # a sweep's trial that its pruner stopped early (worker/pruning.py), after a checkpoint

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


class TrialState(StrEnum):
    """A sweep's trial: Optuna's trial states as the API shows them (RUNNING, COMPLETE, PRUNED, FAIL)."""

    RUNNING = "running"
    COMPLETED = "completed"
    PRUNED = "pruned"
    FAILED = "failed"


class SweepStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


TERMINAL = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED, JobStatus.PRUNED}
)

# Where each state may go. QUEUED is reachable again from the active states so the reaper can requeue a job
# whose worker died.
ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.STARTING, JobStatus.CANCELLED, JobStatus.FAILED}),
    JobStatus.STARTING: frozenset(
        {
            JobStatus.RUNNING,
            JobStatus.FAILED,
            JobStatus.CANCELLING,
            JobStatus.QUEUED,
            JobStatus.TIMED_OUT,
            JobStatus.PRUNED,
        }
    ),
    JobStatus.RUNNING: frozenset(
        {
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.TIMED_OUT,
            JobStatus.CANCELLING,
            JobStatus.RESTARTING,
            JobStatus.QUEUED,
            JobStatus.PREEMPTING,
            JobStatus.PRUNED,
        }
    ),
    # Ending on its own before it stopped (done, failed, out of time) still counts as that end.
    JobStatus.PREEMPTING: frozenset(
        {
            JobStatus.QUEUED,
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.TIMED_OUT,
            JobStatus.CANCELLING,
            JobStatus.PRUNED,
        }
    ),
    # Slurm restarts a job by queueing it again, to wait for nodes (worker/executors/slurm/follow.py).
    JobStatus.RESTARTING: frozenset(
        {JobStatus.STARTING, JobStatus.QUEUED, JobStatus.FAILED, JobStatus.CANCELLING}
    ),
    JobStatus.CANCELLING: frozenset({JobStatus.CANCELLED}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.TIMED_OUT: frozenset(),
    JobStatus.CANCELLED: frozenset(),
    JobStatus.PRUNED: frozenset(),
}

ACTIVE = frozenset(
    {
        JobStatus.STARTING,
        JobStatus.RUNNING,
        JobStatus.RESTARTING,
        JobStatus.CANCELLING,
        JobStatus.PREEMPTING,
    }
)

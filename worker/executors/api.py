"""What an executor must do. As torchx's schedulers are peers behind one `Scheduler`
(torchx/schedulers/api.py), each executor is a folder beside this file, and the worker's Celery glue
(worker/tasks.py) speaks to the one the settings chose (worker/executors/__init__.py::executor_for) through
this Protocol alone.

An executor takes queued jobs and launches them (local: claim, place and start torchrun here) or submits them
(Slurm: sbatch): `JobExecutor`. Each attempt it then runs is a `RunningAttempt`: its `events`, streaming into
SQL; `ended()`, its state (local: its torchrun's exit; Slurm: what `scontrol` says, or that Slurm forgot the
job); `stop(outcome)`, a cancel (local: SIGTERM to the process group, a kill past the grace; Slurm: SIGTERM to
its steps, scancel past cancel_grace_s); `restart(outcome)`, a requeue of a retryable failure within
limits.max_restarts (local: in place, on the GPUs it keeps; Slurm: scontrol requeue).

On those verbs worker/attempts/watch.py decides, for every executor alike, why a running attempt must stop
(cancelled, pruned, past its deadline) and how one whose processes are gone settles (its last events, its
uploads) and then restarts or ends; `RunningAttempt` is defined there, as worker/attempts/ imports no
executor. Each loop keeps only its own reasons around those calls (local: its worker's shutdown, a preemption,
the disk limit, a multi-node job's other nodes; Slurm: a requeue by Slurm, Slurm jobs whose Trainyard job
ended). The rest every executor shares is written once in worker/attempts/ too: starting an attempt, its
events and uploads, its deadline, the queue's limit, how it ends. Executors import those and never each other
(pyproject.toml's import contracts)."""

from __future__ import annotations

from typing import Protocol

from core.executors import ExecutorTraits
from worker.attempts.watch import RunningAttempt

__all__ = ["Background", "JobExecutor", "RunningAttempt"]


class Background(Protocol):
    """A thread an executor runs beside its jobs (the local reaper), stopped when the worker stops."""

    def stop(self) -> None: ...


class JobExecutor(Protocol):
    @property
    def traits(self) -> ExecutorTraits:
        """The torch-free description the API reads too (core/executors.py)."""
        ...

    def start(self) -> list[Background]:
        """The worker is ready: start what runs beside the jobs; what to stop when the worker stops."""
        ...

    def submit(self, job_id: int) -> None:
        """A job was queued: a doorbell, "there may be work". Launch or hand over what can start now, in the
        queue's order rather than the broker's; a repeated or stale call changes nothing."""
        ...

    def run_node(self, job_id: int, attempt: int, node_rank: int) -> None:
        """One node of a job placed on this host by another worker; an executor whose scheduler starts every
        node itself is never sent one."""
        ...

    def shutting_down(self) -> None:
        """Celery's warm shutdown began, which waits for running tasks: stop what runs here (the local
        executor requeues its jobs to resume elsewhere; Slurm's jobs run on, and the next worker follows
        them)."""
        ...

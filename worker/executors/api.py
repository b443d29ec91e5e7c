"""What an executor must do. As torchx's schedulers are peers behind one `Scheduler`
(torchx/schedulers/api.py), each executor is a folder beside this file, and the worker's Celery glue
(worker/tasks.py) speaks to the one the settings chose (worker/executors/__init__.py::executor_for) through
this Protocol alone.

An executor takes queued jobs and launches them (local: claim, place and start torchrun here) or submits them
(Slurm: sbatch), reads their states (the local supervisor polls its processes; the Slurm follower reads
`scontrol`), cancels and requeues them, and streams their events into SQL. What every executor shares is
written once in worker/attempts/: starting an attempt, its events and uploads, its deadline, the queue's
limit, how it ends. Executors import those and never each other (pyproject.toml's import contracts)."""

from __future__ import annotations

from typing import Protocol

from core.executors import ExecutorTraits


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

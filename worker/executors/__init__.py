"""The executors, peers behind one Protocol (api.py): `local` (Trainyard's own workers place and run jobs)
and `slurm` (a worker on a login node hands jobs to Slurm). The choice is made here, once, from
TRAINYARD_EXECUTOR; a third executor is a folder beside these two, an entry below and its traits in
core/executors.py."""

from __future__ import annotations

from collections.abc import Callable

from core.config import Executor, Settings
from worker.executors.api import JobExecutor
from worker.executors.local.executor import LocalExecutor
from worker.executors.slurm.executor import SlurmExecutor

EXECUTORS: dict[Executor, Callable[[], JobExecutor]] = {
    Executor.LOCAL: LocalExecutor,
    Executor.SLURM: SlurmExecutor,
}


def executor_for(settings: Settings) -> JobExecutor:
    """The executor TRAINYARD_EXECUTOR names."""
    return EXECUTORS[settings.executor]()

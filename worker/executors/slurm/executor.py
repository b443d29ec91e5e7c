"""The Slurm executor behind the Protocol (worker/executors/api.py): the doorbell wakes the follower, which
submits queued jobs with sbatch and follows them (follow.py); Slurm places, restarts and reaps."""

from __future__ import annotations

import threading

from core.executors import SLURM, ExecutorTraits
from worker.executors.api import Background
from worker.executors.slurm import follow


class SlurmExecutor:
    def __init__(self) -> None:
        self.shutdown = threading.Event()

    @property
    def traits(self) -> ExecutorTraits:
        return SLURM

    def start(self) -> list[Background]:
        follow.follower(self.shutdown)  # a daemon that ends with the shutdown; the jobs run on in Slurm
        return []

    def submit(self, job_id: int) -> None:
        follow.ring()

    def run_node(self, job_id: int, attempt: int, node_rank: int) -> None:
        raise RuntimeError(
            f"job {job_id}: a node task reached a worker of TRAINYARD_EXECUTOR=slurm, where Slurm starts "
            "every node itself: is a worker of TRAINYARD_EXECUTOR=local sharing this broker?"
        )

    def shutting_down(self) -> None:
        self.shutdown.set()

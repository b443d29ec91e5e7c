"""What ddp, fsdp and pipeline share: their ranks are torchrun processes joined in one torch.distributed
process group, which the strategy joins in setup_environment and leaves in teardown.

The group is left only after a clean finish: after an exception a peer may still be waiting in a
collective, and NCCL's teardown would wait with it instead of letting this rank exit so that torchrun
stops the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from trainers.dist_env import DistEnv
from trainers.strategies.base import ParallelStrategy


@dataclass(frozen=True)
class GroupOptions:
    """How the ranks connect, from the plan and the spec's limits."""

    backend: str  # nccl on GPUs, gloo on the CPU
    # A collective that waits longer (a rank hung or gone) raises, so the job fails with a communication
    # error the worker may restart from, instead of hanging until its max_runtime.
    timeout: timedelta


class ProcessGroupStrategy(ParallelStrategy):
    def __init__(self, env: DistEnv, group: GroupOptions) -> None:
        super().__init__(env)
        self.group = group

    def setup_environment(self) -> None:
        # torchrun's variables (MASTER_ADDR, RANK, WORLD_SIZE, ...) say where and who; the device of a
        # GPU rank is already current, so NCCL binds this rank to its own GPU.
        dist.init_process_group(backend=self.group.backend, timeout=self.group.timeout)

    def reduce_metrics(self, sums: torch.Tensor) -> torch.Tensor:
        """Each rank's sums cover its own shard of the data: the totals are their sum over every rank."""
        totals = sums.clone()
        # SUM, not AVG: gloo has no AVG, and totals are sums anyway.
        dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        return totals

    def barrier(self) -> None:
        dist.barrier()

    def teardown(self) -> None:
        super().teardown()
        dist.destroy_process_group()

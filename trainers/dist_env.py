"""Who this process is in the torchrun world, and the process group that joins the ranks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainers.plan import Plan


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes events and checkpoints."""
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def read_dist_env(plan: Plan) -> DistEnv:
    """torchrun's variables; a plain `python -m trainers.run` is a world of one."""
    rank, local_rank, world_size = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0), _env_int("WORLD_SIZE", 1)
    if world_size != plan.world_size:
        raise ValueError(
            f"the plan expects {plan.world_size} processes but torchrun started {world_size}; "
            f"launch with --nproc-per-node {plan.nproc_per_node}"
        )
    # CUDA_VISIBLE_DEVICES already holds only this job's GPUs, so the local rank indexes into them.
    device = torch.device(f"cuda:{local_rank}" if plan.device == "cuda" else "cpu")
    return DistEnv(rank=rank, local_rank=local_rank, world_size=world_size, device=device)


@contextmanager
def distributed(plan: Plan) -> Iterator[DistEnv]:
    """Join the process group for the duration of training, and leave it even when training fails."""
    env = read_dist_env(plan)
    if env.device.type == "cuda":
        torch.cuda.set_device(env.device)
    joined = env.world_size > 1
    if joined:
        dist.init_process_group(backend=plan.backend)
    try:
        yield env
    finally:
        if joined:
            dist.destroy_process_group()

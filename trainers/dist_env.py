"""Who this process is in the torchrun world. The process group that joins the ranks belongs to the
strategies that use one (trainers/strategies/process_group.py)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from types import FrameType

import torch
import torch.distributed as dist

from jobspec.plan import Plan


class StopRequest:
    """SIGTERM asks training to stop after a final checkpoint (max_runtime, cancel, worker shutdown).

    Ranks receive the signal at slightly different steps, so none acts on its own flag: they agree through a
    collective at a step every rank reaches (`agreed`), and all stop at that same step.
    """

    def __init__(self) -> None:
        self.requested = False
        self._pid = os.getpid()

    def _on_sigterm(self, _signum: int, _frame: FrameType | None) -> None:
        # A forked child inherits this handler until it sets its own (loader workers: StopSafeWorkers).
        if os.getpid() == self._pid:
            self.requested = True

    def listen(self) -> None:
        self._pid = os.getpid()
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def agreed(self, device: torch.device) -> bool:
        """True on every rank once any rank was asked to stop; a collective, so every rank must call it."""
        if not (dist.is_available() and dist.is_initialized()):
            return self.requested
        flag = torch.tensor([float(self.requested)], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    stop: StopRequest = field(default_factory=StopRequest, compare=False)

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


def rank_env(plan: Plan) -> DistEnv:
    """This rank, listening for SIGTERM, its GPU (if any) made current before anything touches CUDA."""
    env = read_dist_env(plan)
    env.stop.listen()
    if env.device.type == "cuda":
        torch.cuda.set_device(env.device)
    return env

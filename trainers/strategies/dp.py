"""DataParallel: one process drives every GPU of the job; each step scatters the batch over replicas that run
in threads, and gathers the outputs on the first GPU.

Simple, and slower than ddp (the GIL, a replica copy every step, one GPU gathering everything): offered for
users coming from nn.DataParallel code. Under autocast the replicas would silently run without the dtype
asked for: parallel_apply hands its worker threads only whether autocast is on, and a fresh thread's
autocast dtype is the default fp16 (an outer bf16 autocast becomes fp16 in the replicas). So each replica's
forward runs under the autocast state of the thread that called DataParallel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import parallel_apply

from trainers.strategies.single import SingleDeviceStrategy


class AutocastReplica(nn.Module):
    """Runs a module under a given autocast state, whichever thread calls it."""

    def __init__(self, module: nn.Module, device_type: str) -> None:
        super().__init__()
        self.module = module
        self.device_type = device_type
        # Captured now, in the caller's thread: autocast state is thread-local.
        self.enabled = torch.is_autocast_enabled(device_type)
        self.dtype = torch.get_autocast_dtype(device_type)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled):
            return self.module(*args, **kwargs)


class AutocastDataParallel(nn.DataParallel):
    def parallel_apply(self, replicas: Sequence[nn.Module], inputs: Sequence[Any], kwargs: Any) -> list[Any]:
        wrapped = [AutocastReplica(replica, "cuda") for replica in replicas]
        return parallel_apply(wrapped, inputs, kwargs, self.device_ids[: len(replicas)])


class DataParallelStrategy(SingleDeviceStrategy):
    """One process like single: nothing to reduce across ranks, no barrier, no gradient sync to skip."""

    loss_in_forward_graph = False  # replicas run in threads of their own

    def wrap(self, module: nn.Module) -> nn.Module:
        # CUDA_VISIBLE_DEVICES holds exactly the job's GPUs; the model and the batch start on the first.
        return AutocastDataParallel(
            module, device_ids=list(range(torch.cuda.device_count())), output_device=0
        )

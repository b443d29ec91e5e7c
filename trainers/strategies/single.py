"""One process, one device: nothing to wrap, nothing to reduce."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from trainers.strategies.base import ParallelStrategy, Reduce


class SingleDeviceStrategy(ParallelStrategy):
    def wrap(self, module: nn.Module) -> nn.Module:
        return module

    def no_sync(self) -> AbstractContextManager[None]:
        return nullcontext()

    def all_reduce(self, tensor: torch.Tensor, op: Reduce = Reduce.MEAN) -> torch.Tensor:
        return tensor

    def barrier(self) -> None:
        return None

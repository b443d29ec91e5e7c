"""One process, one device: nothing to wrap, nothing to reduce. With parallel.placement, named modules stay
on the CPU and the rest goes to the device (CPU/GPU hybrid), still in one process."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from trainers.dist_env import DistEnv
from trainers.placement import hybrid_devices
from trainers.spec import DevicePlacement
from trainers.strategies.base import ParallelStrategy, Reduce


class SingleDeviceStrategy(ParallelStrategy):
    def __init__(self, env: DistEnv, placement: Mapping[str, DevicePlacement] | None = None) -> None:
        super().__init__(env)
        self.placement = placement

    def device_map(self, names: list[str]) -> dict[str, torch.device] | None:
        return None if not self.placement else hybrid_devices(names, self.placement, self.env.device)

    def wrap(self, module: nn.Module) -> nn.Module:
        return module

    def no_sync(self) -> AbstractContextManager[None]:
        return nullcontext()

    def all_reduce(self, tensor: torch.Tensor, op: Reduce = Reduce.MEAN) -> torch.Tensor:
        return tensor

    def barrier(self) -> None:
        return None

"""One process, one device: nothing to wrap, nothing to reduce. With parallel.placement, named modules stay
on the CPU and the rest goes to the device (CPU/GPU hybrid), still in one process."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from jobspec.spec import DevicePlacement
from trainers.dist_env import DistEnv
from trainers.placement import hybrid_devices
from trainers.strategies.base import ParallelStrategy


class SingleDeviceStrategy(ParallelStrategy):
    loss_in_forward_graph = True  # the bare module: nothing around it to compile apart

    def __init__(self, env: DistEnv, placement: Mapping[str, DevicePlacement] | None = None) -> None:
        super().__init__(env)
        self.placement = placement

    def setup_environment(self) -> None:
        """One process: no other rank to connect to."""

    def device_map(self, names: list[str]) -> dict[str, torch.device] | None:
        return None if not self.placement else hybrid_devices(names, self.placement, self.env.device)

    def wrap(self, module: nn.Module) -> nn.Module:
        return module

    def no_sync(self) -> AbstractContextManager[None]:
        return nullcontext()

    def reduce_metrics(self, sums: torch.Tensor) -> torch.Tensor:
        """This process saw every sample: its sums are the job's totals."""
        return sums

    def barrier(self) -> None:
        return None

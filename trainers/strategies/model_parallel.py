"""Naive model parallelism: one process, the model cut into consecutive stages, stage i on the job's GPU i.

Activations cross to the next GPU at each boundary (trainers/placement.py moves them), so one GPU computes
while the others wait: this buys memory, not speed (pipeline overlaps the stages). On a CPU job every stage
is on the CPU and the same mechanics run, which is what CI exercises.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainers.dist_env import DistEnv
from trainers.placement import stage_devices
from trainers.strategies.single import SingleDeviceStrategy


class ModelParallelStrategy(SingleDeviceStrategy):
    loss_in_forward_graph = False  # the loss runs on the last stage's device, compiled apart

    def __init__(self, env: DistEnv, split_at: Sequence[str]) -> None:
        super().__init__(env)
        self.split_at = list(split_at)

    def device_map(self, names: list[str]) -> dict[str, torch.device] | None:
        return stage_devices(names, self.split_at, self.env.device)

"""Learning rate as a pure function of the step, and the optimizer it drives."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from trainers.spec import Optimizer, Schedule, TrainSpec


@dataclass(frozen=True)
class LrSchedule:
    base_lr: float  # already scaled by the plan's lr scaling rule
    schedule: Schedule
    warmup_steps: int
    total_steps: int
    steps_per_epoch: int
    step_size_epochs: int
    gamma: float

    @classmethod
    def from_spec(
        cls, train: TrainSpec, base_lr: float, total_steps: int, steps_per_epoch: int
    ) -> LrSchedule:
        return cls(
            base_lr=base_lr,
            schedule=train.schedule,
            warmup_steps=train.warmup_steps,
            total_steps=total_steps,
            steps_per_epoch=steps_per_epoch,
            step_size_epochs=train.step_size_epochs,
            gamma=train.gamma,
        )


def lr_at(step: int, s: LrSchedule) -> float:
    """The lr of the optimizer step taken after `step` steps are done (0-based)."""
    if step < s.warmup_steps:
        return s.base_lr * (step + 1) / s.warmup_steps
    if s.schedule is Schedule.COSINE:
        progress = (step - s.warmup_steps) / max(1, s.total_steps - s.warmup_steps)
        return s.base_lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    if s.schedule is Schedule.STEP:
        epoch = step // s.steps_per_epoch
        return s.base_lr * s.gamma ** (epoch // s.step_size_epochs)
    return s.base_lr


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def build_optimizer(
    params: Iterable[torch.nn.Parameter], train: TrainSpec, lr: float, device: torch.device
) -> torch.optim.Optimizer:
    # On CUDA one fused kernel updates every parameter, instead of a launch per tensor.
    fused = True if device.type == "cuda" else None
    if train.optimizer is Optimizer.SGD:
        return torch.optim.SGD(
            params, lr=lr, momentum=train.momentum, weight_decay=train.weight_decay, fused=fused
        )
    if train.optimizer is Optimizer.ADAM:
        return torch.optim.Adam(params, lr=lr, weight_decay=train.weight_decay, fused=fused)
    return torch.optim.AdamW(params, lr=lr, weight_decay=train.weight_decay, fused=fused)

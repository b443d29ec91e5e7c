"""A model factory and loss whose steps take a set time, so a test can cancel a job mid-run on any box."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn


class Paced(nn.Module):
    def __init__(self, features: int, hidden: int, delay_s: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.delay_s = delay_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.delay_s)
        return self.body(x)


def build(features: int = 8, hidden: int = 32, delay_s: float = 0.0) -> nn.Module:
    return Paced(features, hidden, delay_s)


def loss(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    x, y = batch
    return F.mse_loss(model(x), y), {}

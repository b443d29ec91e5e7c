"""A linear problem with noise, the same on every rank (the seed), so the loss falls step by step."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def build(samples: int = 1024, features: int = 8, seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    w = torch.randn(features, 1, generator=generator)
    y = x @ w + 0.01 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(x, y), TensorDataset(x[:64], y[:64])

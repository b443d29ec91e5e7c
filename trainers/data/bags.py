"""Seeded bags of token ids that can be learned: each class owns a few indicative tokens.

A sample is data.bag_size ids: a quarter of them (at least one) drawn from its class's indicative tokens,
the rest uniformly from the whole vocabulary. The mean of the bag's embeddings therefore carries the class,
diluted by noise, which is what an embedding-bag classifier has to learn to pick out.
"""

from __future__ import annotations

import torch

from jobspec.spec import DataSpec

_INDICATIVE_PER_CLASS = 8


def _indicative_tokens(data: DataSpec, generator: torch.Generator) -> torch.Tensor:
    """num_classes x k distinct ids; classes share none, so no token is evidence for two of them."""
    per_class = max(1, min(_INDICATIVE_PER_CLASS, data.vocab_size // data.num_classes))
    if per_class * data.num_classes > data.vocab_size:
        raise ValueError(
            f"data.vocab_size={data.vocab_size} is too small for {data.num_classes} classes; "
            f"use at least {data.num_classes}"
        )
    chosen = torch.randperm(data.vocab_size, generator=generator)[: per_class * data.num_classes]
    return chosen.view(data.num_classes, per_class)


def _samples(
    data: DataSpec, indicative: torch.Tensor, count: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(data.num_classes, (count,), generator=generator)
    signal = max(1, data.bag_size // 4)
    picks = torch.randint(indicative.shape[1], (count, signal), generator=generator)
    noise = torch.randint(data.vocab_size, (count, data.bag_size - signal), generator=generator)
    return torch.cat([indicative[labels.unsqueeze(1), picks], noise], dim=1), labels


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """num_samples training bags (int64, N x bag_size), and val_fraction of that many more held out."""
    generator = torch.Generator().manual_seed(seed)
    indicative = _indicative_tokens(data, generator)
    train_x, train_y = _samples(data, indicative, data.num_samples, generator)
    val_x, val_y = _samples(data, indicative, round(data.num_samples * data.val_fraction), generator)
    return train_x, train_y, val_x, val_y

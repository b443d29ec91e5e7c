"""Seeded synthetic images that can be learned: one smooth prototype per class plus Gaussian noise."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from jobspec.spec import DataSpec

NATIVE_SIZE = 32
# Prototypes are drawn at this resolution and upsampled, so classes differ in spatial structure a CNN can
# pick up, not only in independent pixels.
_PROTOTYPE_SIZE = 4
_NOISE_STD = 1.0


def _prototypes(data: DataSpec, generator: torch.Generator) -> torch.Tensor:
    coarse = torch.randn(
        data.num_classes, data.channels, _PROTOTYPE_SIZE, _PROTOTYPE_SIZE, generator=generator
    )
    return F.interpolate(coarse, size=(NATIVE_SIZE, NATIVE_SIZE), mode="bilinear", align_corners=False)


def _samples(
    prototypes: torch.Tensor, count: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(len(prototypes), (count,), generator=generator)
    noise = torch.randn(count, *prototypes.shape[1:], generator=generator)
    return prototypes[labels] + _NOISE_STD * noise, labels


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """num_samples training images, and val_fraction of that many more held out from the same classes."""
    generator = torch.Generator().manual_seed(seed)
    prototypes = _prototypes(data, generator)
    train_x, train_y = _samples(prototypes, data.num_samples, generator)
    val_x, val_y = _samples(prototypes, round(data.num_samples * data.val_fraction), generator)
    return train_x, train_y, val_x, val_y

"""The data factory: `build(**data.kwargs)` returns (train, val) map-style Datasets of (image, label) pairs.

Trainyard shards them over the ranks with a seeded DistributedSampler and reads them through a DataLoader
with `data.loader_workers` processes. A factory may also return an IterableDataset, and a collate function
as a third element. Files would be read from `root`, which Trainyard passes when the spec sets `data.root`
(resolved inside TRAINYARD_DATA_DIR); this one generates its images instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset


class Blobs(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Noisy images around one smooth prototype per class: learnable by a small CNN in a few dozen steps."""

    def __init__(self, prototypes: torch.Tensor, count: int, generator: torch.Generator) -> None:
        self.labels = torch.randint(len(prototypes), (count,), generator=generator)
        noise = torch.randn(count, *prototypes.shape[1:], generator=generator)
        self.images = prototypes[self.labels] + noise

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


def build(
    num_samples: int = 2048, image_size: int = 16, classes: int = 10, val_fraction: float = 0.1, seed: int = 0
) -> tuple[Blobs, Blobs]:
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.randn(classes, 3, 4, 4, generator=generator)
    prototypes = F.interpolate(coarse, size=(image_size, image_size), mode="bilinear", align_corners=False)
    train = Blobs(prototypes, num_samples, generator)
    return train, Blobs(prototypes, round(num_samples * val_fraction), generator)

"""A folder of images with one subdirectory per class (torchvision ImageFolder's layout), read from
TRAINYARD_DATA_DIR and decoded once with PIL into a uint8 tensor that the loop then slices like any other.

Decoding is the slow part, so it runs in data.loader_workers DataLoader processes. Every image is resized to
data.image_size (default 64) at decode time, so the dataset is one dense tensor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from trainers.datadir import data_dir_from_env, resolve_data_root
from trainers.spec import DataSpec

DEFAULT_SIDE = 64
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
_DECODE_BATCH = 64


def _root(data: DataSpec) -> Path:
    assert data.root is not None  # the spec requires a root for on-disk datasets
    return resolve_data_root(data_dir_from_env(), data.root)


def class_names(root: Path) -> list[str]:
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(names) < 2:
        raise ValueError(
            f"data.root ({root}) needs one subdirectory per class, at least 2; found {len(names)}"
        )
    return names


def num_classes(data: DataSpec) -> int:
    return len(class_names(_root(data)))


def list_images(root: Path) -> tuple[list[Path], list[int]]:
    """Every image under each class directory; a file whose real path leaves root is refused."""
    paths: list[Path] = []
    labels: list[int] = []
    for label, name in enumerate(class_names(root)):
        for path in sorted((root / name).rglob("*")):
            if path.suffix.lower() not in EXTENSIONS or not path.is_file():
                continue
            if not path.resolve().is_relative_to(root):
                raise ValueError(f"data.root: {path} is a symlink leading outside data.root; remove it")
            paths.append(path)
            labels.append(label)
    if not paths:
        raise ValueError(f"data.root ({root}) holds no images ({', '.join(EXTENSIONS)}) in its class folders")
    return paths, labels


class DecodedImages(Dataset[torch.Tensor]):
    """RGB uint8 images, C x side x side."""

    def __init__(self, paths: list[Path], side: int) -> None:
        self.paths = paths
        self.side = side

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        from PIL import Image

        with Image.open(self.paths[index]) as image:
            rgb = image.convert("RGB").resize((self.side, self.side), Image.Resampling.BILINEAR)
            pixels = np.asarray(rgb, dtype=np.uint8)
        return torch.from_numpy(pixels.copy()).permute(2, 0, 1)


def decode_all(paths: list[Path], side: int, workers: int) -> torch.Tensor:
    loader = DataLoader(DecodedImages(paths, side), batch_size=_DECODE_BATCH, num_workers=workers)
    return torch.cat(list(loader))


def split_held_out(count: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the training and held-out samples, the same for every rank (same seed)."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    held_out = round(count * fraction)
    return order[held_out:], order[:held_out]


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    paths, labels = list_images(_root(data))
    images = decode_all(paths, data.image_size or DEFAULT_SIDE, data.loader_workers)
    targets = torch.tensor(labels)
    train, val = split_held_out(len(paths), data.val_fraction, seed)
    return images[train], targets[train], images[val], targets[val]

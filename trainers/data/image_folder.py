"""A folder of images with one subdirectory per class (torchvision ImageFolder's layout), read from
TRAINYARD_DATA_DIR: listed here, decoded by trainers/data/images.py in data.loader_workers processes, once
into a resident uint8 tensor or per epoch when streamed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from jobspec.data_plan import load_side
from jobspec.datadir import confined_file, data_dir_from_env, resolve_data_root, shown_data_path
from jobspec.spec import DataSpec
from trainers.data.images import ImageSet, decode_whole, image_set

EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _root(data: DataSpec) -> tuple[Path, Path]:
    """The data dir, and data.root resolved inside it."""
    assert data.root is not None  # the spec requires a root for on-disk datasets
    data_dir = data_dir_from_env()
    return data_dir, resolve_data_root(data_dir, data.root)


def class_names(data_dir: Path, root: Path) -> list[str]:
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(names) < 2:
        raise ValueError(
            f"data.root ({shown_data_path(data_dir, root)}) needs one subdirectory per class, at least 2; "
            f"found {len(names)}"
        )
    return names


def num_classes(data: DataSpec) -> int:
    return len(class_names(*_root(data)))


def list_images(data_dir: Path, root: Path) -> tuple[list[Path], list[int]]:
    """Every image under each class directory, each refused if a symlink leads it outside the data dir."""
    paths: list[Path] = []
    labels: list[int] = []
    for label, name in enumerate(class_names(data_dir, root)):
        for path in sorted((root / name).rglob("*")):
            if path.suffix.lower() not in EXTENSIONS or not path.is_file():
                continue
            paths.append(confined_file(data_dir, path))
            labels.append(label)
    if not paths:
        raise ValueError(
            f"data.root ({shown_data_path(data_dir, root)}) holds no images ({', '.join(EXTENSIONS)}) in its "
            "class folders"
        )
    return paths, labels


@dataclass(frozen=True)
class FolderSamples:
    data_dir: Path
    paths: np.ndarray  # bytes: each file's real path (numpy, not a list of objects that forked workers copy)
    labels: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.labels)

    def read(self, index: int) -> bytes:
        return Path(os.fsdecode(self.paths[index])).read_bytes()

    def name(self, index: int) -> str:
        return shown_data_path(self.data_dir, Path(os.fsdecode(self.paths[index])))


def open_set(data: DataSpec, seed: int) -> ImageSet:
    """The folder's files and labels, listed, not read."""
    data_dir, root = _root(data)
    paths, labels = list_images(data_dir, root)
    samples = FolderSamples(data_dir, np.array([os.fsencode(path) for path in paths]), np.array(labels))
    return image_set(samples, len(class_names(data_dir, root)), data, seed)


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decoded whole: the resident path."""
    return decode_whole(open_set(data, seed), data, load_side(data))

"""MNIST's IDX files (train-images-idx3-ubyte and friends, optionally .gz), read from TRAINYARD_DATA_DIR.

An IDX file is a 4-byte magic (two zeros, a type code, the number of dimensions), one big-endian int32 per
dimension, then the values. Images stay uint8 and become floats per batch on the device.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from jobspec.datadir import confined_file, data_dir_from_env, resolve_data_root, shown_data_path
from jobspec.spec import DataSpec

NUM_CLASSES = 10
_UBYTE = 0x08
SPLITS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _read_bytes(data_dir: Path, root: Path, name: str) -> bytes:
    for path, opener in ((root / name, Path.read_bytes), (root / f"{name}.gz", _gunzip)):
        if path.is_file():
            return opener(confined_file(data_dir, path))
    raise ValueError(
        f"data.root has no {name} or {name}.gz (looked in {shown_data_path(data_dir, root)}); "
        "put MNIST's IDX files there"
    )


def _gunzip(path: Path) -> bytes:
    with gzip.open(path, "rb") as f:
        return f.read()


def parse_idx(raw: bytes, name: str, ndim: int) -> np.ndarray:
    header = 4 + 4 * ndim
    if len(raw) < header or raw[:2] != b"\0\0" or raw[2] != _UBYTE or raw[3] != ndim:
        raise ValueError(f"{name} is not an unsigned-byte IDX file with {ndim} dimension(s)")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">i4", count=ndim, offset=4))
    values = np.frombuffer(raw, dtype=np.uint8, offset=header)
    if values.size != int(np.prod(shape)):
        raise ValueError(f"{name} declares shape {shape} but holds {values.size} values; it is truncated")
    return values.reshape(shape)


def _read_split(data_dir: Path, root: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    images_name, labels_name = SPLITS[split]
    images = parse_idx(_read_bytes(data_dir, root, images_name), images_name, 3)
    labels = parse_idx(_read_bytes(data_dir, root, labels_name), labels_name, 1).astype(np.int64)
    if len(images) != len(labels):
        raise ValueError(f"{images_name} has {len(images)} images but {labels_name} {len(labels)} labels")
    if labels.max() >= NUM_CLASSES:
        raise ValueError(f"{labels_name} holds label {labels.max()}; MNIST labels are 0..9")
    return torch.from_numpy(images[:, None].copy()), torch.from_numpy(labels)


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 60k training images, and the 10k test images as the held-out split."""
    assert data.root is not None  # the spec requires a root for on-disk datasets
    data_dir = data_dir_from_env()
    root = resolve_data_root(data_dir, data.root)
    return (*_read_split(data_dir, root, "train"), *_read_split(data_dir, root, "test"))

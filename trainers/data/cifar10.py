"""CIFAR-10 in its binary distribution (cifar-10-batches-bin), read from under TRAINYARD_DATA_DIR.

The binary format, not the python one: that is pickled, and unpickling a file from a user directory can run
code. Each record is one label byte and 3072 pixel bytes (1024 red, then green, then blue, rows of 32).
Images stay uint8, a quarter of float32's size; they become floats per batch on the device.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from jobspec.datadir import confined_file, data_dir_from_env, resolve_data_root, shown_data_path
from jobspec.spec import DataSpec

NUM_CLASSES = 10
SIDE = 32
_RECORD = 1 + 3 * SIDE * SIDE
BATCHES_DIR = "cifar-10-batches-bin"
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"


def batches_dir(root: Path) -> Path:
    """data.root may name the extracted archive's parent or the batches directory itself."""
    inner = root / BATCHES_DIR
    return inner if inner.is_dir() else root


def read_records(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % _RECORD:
        raise ValueError(
            f"{path.name} is not a CIFAR-10 binary batch: {raw.size} bytes is not a whole number of "
            f"{_RECORD}-byte records; use the binary version (cifar-10-binary.tar.gz)"
        )
    records = raw.reshape(-1, _RECORD)
    labels = records[:, 0].astype(np.int64)
    if labels.max() >= NUM_CLASSES:
        raise ValueError(f"{path.name} holds label {labels.max()}; CIFAR-10 labels are 0..9")
    images = records[:, 1:].reshape(-1, 3, SIDE, SIDE)
    return torch.from_numpy(images.copy()), torch.from_numpy(labels)


def _read_split(data_dir: Path, directory: Path, names: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    paths = [confined_file(data_dir, directory / name) for name in names if (directory / name).is_file()]
    if not paths:
        raise ValueError(
            f"data.root has none of {', '.join(names)} (looked in {shown_data_path(data_dir, directory)}); "
            f"extract cifar-10-binary.tar.gz there"
        )
    parts = [read_records(path) for path in paths]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The five training batches that exist, and the test batch as the held-out split."""
    assert data.root is not None  # the spec requires a root for on-disk datasets
    data_dir = data_dir_from_env()
    directory = batches_dir(resolve_data_root(data_dir, data.root))
    train_x, train_y = _read_split(data_dir, directory, TRAIN_FILES)
    val_x, val_y = _read_split(data_dir, directory, (TEST_FILE,))
    return train_x, train_y, val_x, val_y

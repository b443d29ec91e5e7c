"""scikit-learn's 8x8 handwritten digits: 1797 images that ship with the library, so nothing downloads.

The images are read from the file scikit-learn ships them in, without importing scikit-learn: its import
(scipy and pandas with it) took a rank or a standby factory about 3 CPU-s, more than a digits job's training.
Where that file is not found, scikit-learn's own loader reads them. The stratified split is a few lines of
numpy for the same reason.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from jobspec.spec import DataSpec

_MAX_PIXEL = 16.0
_SHIPPED = ("datasets", "data", "digits.csv.gz")  # in scikit-learn's package: 64 pixels, then the label


def _shipped_file() -> Path | None:
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder).joinpath(*_SHIPPED)
        if path.is_file():
            return path
    return None


def _images_and_labels() -> tuple[np.ndarray, np.ndarray]:
    path = _shipped_file()
    if path is None:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.data, bunch.target
    with gzip.open(path, "rt") as file:
        table = np.loadtxt(file, delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64)


def stratified_split(labels: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the training and the held-out images: each class holds out its share (rounded), drawn at
    random with `seed`, so both splits keep the classes' proportions."""
    rng = np.random.default_rng(seed)
    held_out = []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        held_out.append(members[: round(len(members) * val_fraction)])
    val = np.sort(np.concatenate(held_out))
    train = np.setdiff1d(np.arange(len(labels)), val)
    return rng.permutation(train), val


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    pixels, labels = _images_and_labels()
    images = (pixels / _MAX_PIXEL).astype(np.float32).reshape(-1, 1, 8, 8)
    train, val = stratified_split(labels, data.val_fraction, seed)
    train_x, val_x = images[train], images[val]
    # Statistics of the training split only, so nothing of the held-out images leaks into training.
    mean, std = train_x.mean(), train_x.std()
    return (
        torch.from_numpy((train_x - mean) / std),
        torch.from_numpy(labels[train]).long(),
        torch.from_numpy((val_x - mean) / std),
        torch.from_numpy(labels[val]).long(),
    )

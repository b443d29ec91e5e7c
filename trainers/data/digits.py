"""scikit-learn's 8x8 handwritten digits: 1797 images that ship with the library, so nothing downloads.

scikit-learn is imported on use: it adds a second to a cold rank's startup, and only this dataset needs it (a
warm standby has imported it ahead, trainers/warm/standby.py).
"""

from __future__ import annotations

import numpy as np
import torch

from jobspec.spec import DataSpec

_MAX_PIXEL = 16.0


def _stratified_split(
    images: np.ndarray, labels: np.ndarray, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    held_out = round(len(labels) * val_fraction)
    if held_out == 0:
        return images, labels, images[:0], labels[:0]
    from sklearn.model_selection import train_test_split

    train_x, val_x, train_y, val_y = train_test_split(
        images, labels, test_size=held_out, stratify=labels, random_state=seed
    )
    return train_x, train_y, val_x, val_y


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (bunch.data / _MAX_PIXEL).astype(np.float32).reshape(-1, 1, 8, 8)
    train_x, train_y, val_x, val_y = _stratified_split(images, bunch.target, data.val_fraction, seed)
    # Statistics of the training split only, so nothing of the held-out images leaks into training.
    mean, std = train_x.mean(), train_x.std()
    return (
        torch.from_numpy((train_x - mean) / std),
        torch.from_numpy(train_y).long(),
        torch.from_numpy((val_x - mean) / std),
        torch.from_numpy(val_y).long(),
    )

"""Datasets written to disk as their real formats (CIFAR-10 batches, MNIST idx files) under a data dir the
trainers are pointed at."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np


def write_cifar_batch(path: Path, labels: list[int], seed: int) -> np.ndarray:
    pixels = np.random.default_rng(seed).integers(0, 256, (len(labels), 3072), dtype=np.uint8)
    records = np.concatenate([np.array(labels, dtype=np.uint8)[:, None], pixels], axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    records.tofile(path)
    return pixels.reshape(-1, 3, 32, 32)


def write_idx(path: Path, values: np.ndarray, compress: bool) -> None:
    header = bytes([0, 0, 0x08, values.ndim]) + struct.pack(f">{values.ndim}i", *values.shape)
    raw = header + values.astype(np.uint8).tobytes()
    if compress:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(raw))
    else:
        path.write_bytes(raw)

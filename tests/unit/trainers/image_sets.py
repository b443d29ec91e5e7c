"""Image datasets made on the spot: JPEG folders in torchvision ImageFolder's layout and WebDataset tar shards
(key.jpg + key.cls). Each picture's colour tells its class, under noise and a box of another colour, so a
small model learns them in a few steps. The tests write a few hundred tiny ones; bench/streaming.py writes
ImageNet-sized ones, in parallel processes.
"""

from __future__ import annotations

import colorsys
import io
import tarfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class Pictures:
    count: int
    classes: int
    width: tuple[int, int]  # a range: each picture's own is drawn from it
    height: tuple[int, int]
    seed: int = 0

    def label(self, index: int) -> int:
        return index % self.classes

    def jpeg(self, index: int, quality: int = 90) -> bytes:
        rng = np.random.default_rng([self.seed, index])
        width, height = (int(rng.integers(low, high + 1)) for low, high in (self.width, self.height))
        hue = self.label(index) / self.classes
        colour = np.array(colorsys.hsv_to_rgb(hue, 0.8, 0.9)) * 255
        pixels = colour + rng.normal(0, 20, (height, width, 3))
        top, left = int(rng.integers(0, height // 2 + 1)), int(rng.integers(0, width // 2 + 1))
        pixels[top : top + height // 3, left : left + width // 3] = 255 - colour
        out = io.BytesIO()
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(out, "JPEG", quality=quality)
        return out.getvalue()

    def file(self, index: int) -> Path:
        """Where write_folder puts it, relative to the folder."""
        return Path(f"class{self.label(index):03d}") / f"{index:07d}.jpg"


def _write(pictures: Pictures, root: Path, indices: range) -> None:
    for index in indices:
        (root / pictures.file(index)).write_bytes(pictures.jpeg(index))


def _chunks(count: int, parts: int) -> Iterator[range]:
    step = -(-count // parts)
    return (range(start, min(start + step, count)) for start in range(0, count, step))


def write_folder(root: Path, pictures: Pictures, processes: int = 1) -> Path:
    """One subfolder per class; `processes` write in parallel."""
    for label in range(pictures.classes):
        (root / pictures.file(label).parent).mkdir(parents=True, exist_ok=True)
    if processes == 1:
        _write(pictures, root, range(pictures.count))
        return root
    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(_write, repeat(pictures), repeat(root), _chunks(pictures.count, 64)))
    return root


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    tar.addfile(member, io.BytesIO(data))


def write_shards(root: Path, pictures: Pictures, per_shard: int) -> Path:
    """Shards of `per_shard` samples each, as WebDataset writes them: key.jpg then key.cls."""
    root.mkdir(parents=True, exist_ok=True)
    for shard, indices in enumerate(_chunks(pictures.count, -(-pictures.count // per_shard))):
        with tarfile.open(root / f"shard-{shard:05d}.tar", "w") as tar:
            for index in indices:
                _add(tar, f"{index:07d}.jpg", pictures.jpeg(index))
                _add(tar, f"{index:07d}.cls", str(pictures.label(index)).encode())
    return root


BAD_JPEG = b"\xff\xd8\xff truncated"  # a JPEG's start, and no image


@dataclass(frozen=True)
class IndexedSamples:
    """Samples 0..count-1 as a loader reads them, each labelled with its index, so a batch's labels say which
    files it holds; `bad` ones are a JPEG's start and no image. `image` makes a good one's bytes (picklable,
    for loader workers); `prefix` names them in messages."""

    count: int
    image: Callable[[int], bytes]
    bad: frozenset[int] = frozenset()
    prefix: str = "sample"
    labels: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", np.arange(self.count))

    def __len__(self) -> int:
        return self.count

    def read(self, index: int) -> bytes:
        return BAD_JPEG if index in self.bad else self.image(index)

    def name(self, index: int) -> str:
        return f"{self.prefix}-{index}"

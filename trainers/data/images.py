"""image_folder's and shards' samples as map-style datasets, decoded in DataLoader worker processes into
RGB uint8 squares of data.load_size: once and whole for the resident path, or per epoch when streamed
(trainers/data/streamed.py).

Under data.decode=gpu the workers read the bytes alone, and under auto's split they decode some samples and
read the others' bytes: which ones depends on each sample's index alone (`worker_decodes`), so a resumed run
decodes each where it did.

An unreadable or undecodable file is a bad sample. The worker reports it, by name, next to the batch; the
rank applies data.on_bad_sample: `fail` raises, naming the file; `skip` counts it, and the worker has put
the next readable sample of the split in its place, so batches keep their size and a resumed run reads
the same samples (the replacement depends on the data alone). The resident path drops skipped files.
"""

from __future__ import annotations

import math
from collections.abc import Sized
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from jobspec.decode_plan import WORKERS_DECODE_ALL
from jobspec.spec import DataSpec
from jobspec.spec_augment import OnBadSample
from trainers.data.decode import Encoded, Split, decode_square, is_jpeg
from trainers.data.loader import stop_safe
from trainers.user_errors import error_line

# Replacements tried in a row before a run of unreadable files is taken for a broken dataset.
MAX_REPLACEMENTS = 16
_DECODE_BATCH = 64
# What a worker yields per sample: the image (or its bytes), its label, what was wrong ("": nothing), and
# the file's name where the GPU decodes it, for its messages.
Item = tuple[torch.Tensor, int, str, str]


class Samples(Sized, Protocol):
    """Encoded images and their labels, by index."""

    @property
    def labels(self) -> np.ndarray:
        """int64, one per sample."""
        ...

    def read(self, index: int) -> bytes: ...

    def name(self, index: int) -> str:
        """The file (or shard member) as messages show it."""
        ...


@dataclass(frozen=True)
class ImageSet:
    samples: Samples
    num_classes: int
    train: np.ndarray  # indices into samples
    val: np.ndarray


def split_held_out(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the training and held-out samples, the same for every rank (same seed)."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).numpy()
    held_out = round(count * fraction)
    return order[held_out:], order[:held_out]


def image_set(samples: Samples, num_classes: int, data: DataSpec, seed: int) -> ImageSet:
    train, val = split_held_out(len(samples), data.val_fraction, seed)
    return ImageSet(samples, num_classes, train, val)


def worker_decodes(index: int, share: float) -> bool:
    """Whether the loader worker decodes sample `index` (else the GPU does): `share` of the samples, spread
    evenly over the indices, so every class of a folder alike, and the same in every process and run."""
    return math.floor((index + 1) * share) > math.floor(index * share)


class DecodedImages(Dataset[Item]):
    """The samples at `indices`, `workers_share` of them (1: all, 0: none) decoded to side x side here, the
    others read as JPEG bytes for the GPU. replace=True puts the next readable sample of `indices` in place
    of a bad one."""

    def __init__(
        self, samples: Samples, indices: np.ndarray, side: int, workers_share: float, replace: bool
    ) -> None:
        self.samples = samples
        self.indices = indices
        self.side = side
        self.workers_share = workers_share
        self.replace = replace

    def __len__(self) -> int:
        return len(self.indices)

    def _decoded(self, index: int) -> torch.Tensor:
        raw = self.samples.read(index)
        if worker_decodes(index, self.workers_share):
            return decode_square(raw, self.side)
        if not is_jpeg(raw):
            raise ValueError("data.decode=gpu decodes JPEG files only")
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8)

    def __getitem__(self, position: int) -> Item:
        problem = ""
        for tried in range(MAX_REPLACEMENTS if self.replace else 1):
            index = int(self.indices[(position + tried) % len(self.indices)])
            try:
                image = self._decoded(index)
                name = self.samples.name(index) if image.dim() == 1 else ""
                return image, int(self.samples.labels[index]), problem, name
            except Exception as exc:  # PIL raises a dozen kinds for a broken file; each is this file's fault
                problem = problem or f"{self.samples.name(index)} cannot be read ({error_line(exc)})"
        if self.replace:
            raise ValueError(
                f"data.root: {MAX_REPLACEMENTS} images in a row cannot be read, from "
                f"{self.samples.name(int(self.indices[position]))} on; check the dataset's files"
            )
        index = int(self.indices[position])
        # Only `fail` gets here, and fails the job on this sample: its pixels are never seen.
        decoded = worker_decodes(index, self.workers_share)
        blank = torch.zeros((3, self.side, self.side) if decoded else (0,), dtype=torch.uint8)
        return blank, int(self.samples.labels[index]), problem, ""


Images = torch.Tensor | Encoded | Split


def batched(images: list[torch.Tensor], names: list[str]) -> Images:
    """Decoded squares stack into one uint8 batch; JPEG bytes of many lengths pack into one (Encoded); a
    batch of both (auto's split) keeps each part apart, and where the squares stand."""
    decoded_at = [i for i, image in enumerate(images) if image.dim() == 3]
    if len(decoded_at) == len(images):
        return default_collate(images)
    files = [(image, name) for image, name in zip(images, names, strict=True) if image.dim() == 1]
    encoded = Encoded.packed([image for image, _ in files], [name for _, name in files])
    if not decoded_at:
        return encoded
    # default_collate stacks into shared memory in a worker: no copy on the way to the rank.
    return Split(default_collate([images[i] for i in decoded_at]), encoded, decoded_at)


def collate(items: list[Item]) -> tuple[Images, torch.Tensor, list[str]]:
    images, labels, problems, names = zip(*items, strict=True)
    return batched(list(images), list(names)), torch.tensor(labels), list(problems)


class BadSamples:
    """data.on_bad_sample, applied in the rank to what its loader workers reported."""

    def __init__(self, policy: OnBadSample) -> None:
        self.policy = policy
        self.count = 0  # skipped so far by this rank

    def check(self, problems: list[str]) -> list[bool]:
        """Which samples of a batch were bad; raises under `fail`, counts and logs them under `skip`."""
        bad = [bool(problem) for problem in problems]
        for problem in filter(None, problems):
            if self.policy is OnBadSample.FAIL:
                raise ValueError(
                    f"data.on_bad_sample=fail: {problem}; fix or remove the file, or set data.on_bad_sample "
                    "to skip"
                )
            print(f"skipped a bad sample: {problem}", flush=True)
            self.count += 1
        return bad


def decode_whole(
    images: ImageSet, data: DataSpec, side: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train_x, train_y, val_x, val_y) decoded once, for the resident path; bad files dropped or failed."""
    policy = BadSamples(data.on_bad_sample)
    split: list[torch.Tensor] = []
    for indices in (images.train, images.val):
        dataset = DecodedImages(images.samples, indices, side, WORKERS_DECODE_ALL, replace=False)
        loader: DataLoader[Any] = DataLoader(
            dataset,
            **stop_safe(
                {"batch_size": _DECODE_BATCH, "num_workers": data.loader_workers, "collate_fn": collate}
            ),
        )
        # Filled in place: a set that takes a quarter of the memory must not be held twice on the way.
        x = torch.empty((len(indices), 3, side, side), dtype=torch.uint8)
        y = torch.from_numpy(images.samples.labels[indices])
        keep = torch.ones(len(indices), dtype=torch.bool)
        for start, (pixels, _, problems) in zip(range(0, len(indices), _DECODE_BATCH), loader, strict=True):
            x[start : start + len(pixels)] = pixels
            keep[start : start + len(pixels)] = ~torch.tensor(policy.check(problems), dtype=torch.bool)
        split += [x, y] if keep.all() else [x[keep], y[keep]]
    train_x, train_y, val_x, val_y = split
    return train_x, train_y, val_x, val_y

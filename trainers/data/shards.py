"""WebDataset-style tar shards (data.dataset=shards): data.root holds *.tar files whose samples are members
key.jpg (or .jpeg, .png, .webp) and key.cls (the class index as text), key being the member's path up to
the first dot of its file name.

Each shard's headers are read once per rank, never its images: the index keeps every sample's shard, byte
offset and size, so any sample is one read away. Shards are then read as a map-style dataset: shuffled per
epoch, sharded over ranks and loader workers, and resumed at any step like an image folder.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from jobspec.data_plan import load_side
from jobspec.spec import DataSpec
from trainers.data.files import Files
from trainers.data.images import ImageSet, decode_whole, image_set
from trainers.data.roots import Entry, data_root, open_root

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
LABEL_EXTENSION = "cls"


@dataclass(frozen=True)
class ShardSamples:
    files: Files
    tars: tuple[Entry, ...]
    shard: np.ndarray  # int32: which tar
    offset: np.ndarray  # int64: where the image's bytes start in it
    size: np.ndarray  # int64
    labels: np.ndarray  # int64
    keys: np.ndarray  # bytes: the sample's key, for messages

    def __len__(self) -> int:
        return len(self.labels)

    def read(self, index: int) -> bytes:
        tar = self.tars[self.shard[index]]
        return self.files.read(tar.name, int(self.offset[index]), int(self.size[index]), tar.version)

    def name(self, index: int) -> str:
        tar = self.files.shown(self.tars[self.shard[index]].name)
        return f"{tar}: sample {self.keys[index].decode(errors='replace')}"


def _split_name(name: str) -> tuple[str, str]:
    """(key, extension): WebDataset splits a member's file name at its first dot."""
    folder, _, file_name = name.rpartition("/")
    stem, _, extension = file_name.partition(".")
    return (f"{folder}/{stem}" if folder else stem), extension.lower()


def _label(tar: tarfile.TarFile, member: tarfile.TarInfo, shown: str) -> int:
    reader = tar.extractfile(member)
    text = reader.read(64).strip() if reader is not None else b""
    if not text.isdigit():
        raise ValueError(
            f"data.root: {shown} member {member.name} holds {text[:20]!r}, not a class index; write the "
            "class index (0, 1, ...) as text in each .cls"
        )
    return int(text)


def index_tar(files: Files, tar_file: Entry) -> list[tuple[bytes, int, int, int]]:
    """(key, offset, size, label) of every sample of one shard, in the shard's order."""
    images: dict[str, tarfile.TarInfo] = {}
    labels: dict[str, int] = {}
    shown = files.shown(tar_file.name)
    try:
        with (
            files.open(tar_file.name, tar_file.size, tar_file.version) as raw,
            tarfile.open(fileobj=raw, mode="r:") as tar,
        ):
            for member in tar:  # headers only: tarfile seeks over each member's data
                key, extension = _split_name(member.name)
                if member.isfile() and extension == LABEL_EXTENSION:
                    labels[key] = _label(tar, member, shown)
                elif member.isfile() and extension in IMAGE_EXTENSIONS:
                    images.setdefault(key, member)
    except tarfile.TarError as exc:
        raise ValueError(
            f"data.root: {shown} is not a readable tar file ({exc}); rewrite the shard, or move it out of "
            "data.root"
        ) from exc
    unlabelled = sorted(set(images) - set(labels))
    if unlabelled:
        first = images[unlabelled[0]].name
        raise ValueError(
            f"data.root: {shown} has no {unlabelled[0]}.{LABEL_EXTENSION} for image {first} "
            f"({len(unlabelled)} unlabelled); every sample needs key.jpg and key.{LABEL_EXTENSION}"
        )
    return [(key.encode(), member.offset_data, member.size, labels[key]) for key, member in images.items()]


def shard_samples(data: DataSpec) -> ShardSamples:
    """The samples of data.root's *.tar shards, indexed from their headers."""
    return _indexed(*data_root(data))


@lru_cache(maxsize=2)  # the planner's num_classes and the loader both ask; the index is read once
def _indexed(named: str, cache_bytes: int, data_dir: Path) -> ShardSamples:
    root = open_root(named, cache_bytes, data_dir)
    tars = tuple(root.entries(lambda relative: relative.endswith(".tar") and "/" not in relative, False))
    if not tars:
        raise ValueError(
            f"data.root ({root.shown}) holds no .tar shards; write WebDataset shards (key.jpg + "
            f"key.{LABEL_EXTENSION} per sample) there"
        )
    rows = [(shard, *row) for shard, tar in enumerate(tars) for row in index_tar(root.files, tar)]
    if not rows:
        raise ValueError(f"data.root ({root.shown}): its {len(tars)} shards hold no images")
    shard, keys, offset, size, labels = zip(*rows, strict=True)
    return ShardSamples(
        root.files,
        tars,
        np.array(shard, dtype=np.int32),
        np.array(offset, dtype=np.int64),
        np.array(size, dtype=np.int64),
        np.array(labels, dtype=np.int64),
        np.array(keys),
    )


def num_classes(data: DataSpec) -> int:
    samples = shard_samples(data)
    classes = int(samples.labels.max()) + 1
    if classes < 2:
        raise ValueError(
            f"data.root: every sample of {data.root} is class 0; a classifier needs at least 2 classes"
        )
    return classes


def open_set(data: DataSpec, seed: int) -> ImageSet:
    return image_set(shard_samples(data), num_classes(data), data, seed)


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decoded whole: the resident path."""
    return decode_whole(open_set(data, seed), data, load_side(data))

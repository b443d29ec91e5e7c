"""A folder of images with one subdirectory per class (torchvision ImageFolder's layout), read from
TRAINYARD_DATA_DIR: listed here, decoded by trainers/data/images.py in data.loader_workers processes, once
into a resident uint8 tensor or per epoch when streamed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np
import torch

from jobspec.data_plan import load_side
from jobspec.spec import DataSpec
from trainers.data.files import Files
from trainers.data.images import ImageSet, decode_whole, image_set
from trainers.data.roots import Root, data_root, open_root

EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def class_names(root: Root) -> list[str]:
    names = root.folders()
    if len(names) < 2:
        raise ValueError(
            f"data.root ({root.shown}) needs one subdirectory per class, at least 2; found {len(names)}"
        )
    return names


def num_classes(data: DataSpec) -> int:
    return len(class_names(open_root(*data_root(data))))


def _image(relative: str, classes: set[str]) -> bool:
    path = PurePosixPath(relative)
    return len(path.parts) > 1 and path.parts[0] in classes and path.suffix.lower() in EXTENSIONS


def list_images(root: Root) -> tuple[list[str], list[str], list[int]]:
    """Every image under each class directory (its name, version and label), each refused if a symlink
    leads it outside the data dir."""
    names = class_names(root)
    label_of = {name: label for label, name in enumerate(names)}
    found = root.entries(lambda relative: _image(relative, set(names)), recursive=True)
    # The classes' order, then each class's files as paths sort (folder by folder), from disk or a store.
    found.sort(
        key=lambda entry: (label_of[entry.relative.split("/")[0]], PurePosixPath(entry.relative).parts)
    )
    if not found:
        raise ValueError(
            f"data.root ({root.shown}) holds no images ({', '.join(EXTENSIONS)}) in its class folders"
        )
    labels = [label_of[entry.relative.split("/")[0]] for entry in found]
    return [entry.name for entry in found], [entry.version for entry in found], labels


@dataclass(frozen=True)
class FolderSamples:
    files: Files
    # numpy, not lists of objects, which forked loader workers would copy page by page as they count refs
    names: np.ndarray  # bytes: each file's real path, or its key
    versions: np.ndarray  # bytes: each object's ETag ("" on disk)
    labels: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.labels)

    def read(self, index: int) -> bytes:
        return self.files.read(self._name(index), version=self.versions[index].decode())

    def name(self, index: int) -> str:
        return self.files.shown(self._name(index))

    def _name(self, index: int) -> str:
        return self.names[index].decode("utf-8", "surrogateescape")


def _encoded(strings: list[str]) -> np.ndarray:
    return np.array([string.encode("utf-8", "surrogateescape") for string in strings])


def open_set(data: DataSpec, seed: int) -> ImageSet:
    """The folder's files and labels, listed, not read."""
    root = open_root(*data_root(data))
    names, versions, labels = list_images(root)
    samples = FolderSamples(root.files, _encoded(names), _encoded(versions), np.array(labels))
    return image_set(samples, len(class_names(root)), data, seed)


def load(data: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decoded whole: the resident path."""
    return decode_whole(open_set(data, seed), data, load_side(data))

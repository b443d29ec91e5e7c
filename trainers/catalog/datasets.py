"""The built-in datasets: one DatasetInfo per DatasetName. Adding a dataset adds its entry here and its
loader in trainers/data/__init__.py; a unit test checks each entry against what its loader yields.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class InputKind(StrEnum):
    """What a model reads and a dataset holds; a model reads only data of its own kind."""

    IMAGES = "images"
    TOKEN_BAGS = "token_bags"

    @property
    def noun(self) -> str:
        return "bags of token ids" if self is InputKind.TOKEN_BAGS else "images"


class DatasetName(StrEnum):
    SYNTHETIC = "synthetic"
    DIGITS = "digits"
    SYNTHETIC_BAGS = "synthetic_bags"
    CIFAR10 = "cifar10"
    MNIST = "mnist"
    IMAGE_FOLDER = "image_folder"


@dataclass(frozen=True)
class DatasetInfo:
    input: InputKind
    sample: str  # one sample's shape, as the reference shows it
    classes: int | str  # the number of classes, or where it comes from when the job decides it
    on_disk: bool = False  # read from data.root under TRAINYARD_DATA_DIR; nothing is ever downloaded
    test_split: bool = False  # evaluated on its own test split, whatever data.val_fraction says


DATASETS: dict[DatasetName, DatasetInfo] = {
    DatasetName.SYNTHETIC: DatasetInfo(InputKind.IMAGES, "data.channels x 32 x 32", "data.num_classes"),
    # scikit-learn's 1797 handwritten digits ship with the library.
    DatasetName.DIGITS: DatasetInfo(InputKind.IMAGES, "1 x 8 x 8", 10),
    DatasetName.SYNTHETIC_BAGS: DatasetInfo(
        InputKind.TOKEN_BAGS, "data.bag_size token ids", "data.num_classes"
    ),
    DatasetName.CIFAR10: DatasetInfo(InputKind.IMAGES, "3 x 32 x 32", 10, on_disk=True, test_split=True),
    DatasetName.MNIST: DatasetInfo(InputKind.IMAGES, "1 x 28 x 28", 10, on_disk=True, test_split=True),
    # Decoded as RGB and resized when read.
    DatasetName.IMAGE_FOLDER: DatasetInfo(
        InputKind.IMAGES, "3 x data.image_size x data.image_size (default 64)", "one per folder", on_disk=True
    ),
}


def datasets_of(kind: InputKind) -> list[DatasetName]:
    return [name for name, info in DATASETS.items() if info.input is kind]

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
    TOKENS = "tokens"  # sequences of token ids, each target the same window one token later

    @property
    def noun(self) -> str:
        nouns = {InputKind.TOKEN_BAGS: "bags of token ids", InputKind.TOKENS: "token sequences"}
        return nouns.get(self, "images")


class DatasetName(StrEnum):
    SYNTHETIC = "synthetic"
    DIGITS = "digits"
    SYNTHETIC_BAGS = "synthetic_bags"
    CIFAR10 = "cifar10"
    MNIST = "mnist"
    IMAGE_FOLDER = "image_folder"
    SHARDS = "shards"
    TOKENS = "tokens"
    TEXT = "text"
    SYNTHETIC_TOKENS = "synthetic_tokens"


@dataclass(frozen=True)
class DatasetInfo:
    input: InputKind
    sample: str  # one sample's shape, as the reference shows it
    classes: int | str  # the number of classes, or where it comes from when the job decides it
    on_disk: bool = False  # read from data.root under TRAINYARD_DATA_DIR; nothing is ever downloaded
    test_split: bool = False  # evaluated on its own test split, whatever data.val_fraction says
    # data.augment's default normalisation (per channel, of 0..1 pixels); none: the dataset is not augmented
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    streams: bool = False  # files decoded per epoch when they do not fit (data.placement)


CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
# ImageNet's channel statistics, the usual normalisation of photographs.
PHOTO_MEAN, PHOTO_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_LOADED = "3 x data.image_size x data.image_size (default: data.load_size, else 64)"
_WINDOW = "data.block_size token ids, the next token of each as target"

DATASETS: dict[DatasetName, DatasetInfo] = {
    DatasetName.SYNTHETIC: DatasetInfo(InputKind.IMAGES, "data.channels x 32 x 32", "data.num_classes"),
    # scikit-learn's 1797 handwritten digits ship with the library.
    DatasetName.DIGITS: DatasetInfo(InputKind.IMAGES, "1 x 8 x 8", 10),
    DatasetName.SYNTHETIC_BAGS: DatasetInfo(
        InputKind.TOKEN_BAGS, "data.bag_size token ids", "data.num_classes"
    ),
    DatasetName.CIFAR10: DatasetInfo(
        InputKind.IMAGES, "3 x 32 x 32", 10, on_disk=True, test_split=True, mean=CIFAR_MEAN, std=CIFAR_STD
    ),
    DatasetName.MNIST: DatasetInfo(
        InputKind.IMAGES, "1 x 28 x 28", 10, on_disk=True, test_split=True, mean=(0.1307,), std=(0.3081,)
    ),
    # Decoded as RGB, its shorter side resized to data.load_size and the middle square kept.
    DatasetName.IMAGE_FOLDER: DatasetInfo(
        InputKind.IMAGES,
        _LOADED,
        "one per folder",
        on_disk=True,
        mean=PHOTO_MEAN,
        std=PHOTO_STD,
        streams=True,
    ),
    # WebDataset's layout: *.tar shards of key.jpg + key.cls (the class index as text).
    DatasetName.SHARDS: DatasetInfo(
        InputKind.IMAGES,
        _LOADED,
        "the largest .cls + 1",
        on_disk=True,
        mean=PHOTO_MEAN,
        std=PHOTO_STD,
        streams=True,
    ),
    # nanoGPT's train.bin (and val.bin), memory-mapped; a text corpus is tokenized into one such file.
    DatasetName.TOKENS: DatasetInfo(InputKind.TOKENS, _WINDOW, "data.vocab_size", on_disk=True),
    DatasetName.TEXT: DatasetInfo(InputKind.TOKENS, _WINDOW, "the tokenizer's vocabulary", on_disk=True),
    # Generated from train.seed: data.num_samples windows of a bigram process that a language model learns.
    DatasetName.SYNTHETIC_TOKENS: DatasetInfo(InputKind.TOKENS, _WINDOW, "data.vocab_size"),
}


def datasets_of(kind: InputKind) -> list[DatasetName]:
    return [name for name, info in DATASETS.items() if info.input is kind]

"""data.augment and the other fields of how images are read: what the spec says about decoding, bad files and
augmentation. Field-level checks only (the planner checks what spans fields); no torch.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from jobspec.spec_fields import Section

Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
AspectRatio = Annotated[float, Field(gt=0.0, le=100.0)]
Pixel = Annotated[float, Field(ge=0.0, le=1.0)]
Spread = Annotated[float, Field(gt=0.0, le=10.0)]


class Decode(StrEnum):
    # Where the loader workers cannot keep up with the model, they decode their part of each batch and the GPU
    # the rest; else cpu: decided at start.
    AUTO = "auto"
    CPU = "cpu"  # in DataLoader worker processes (PIL)
    GPU = "gpu"  # nvJPEG on the rank's GPU, a batch at a time


class OnBadSample(StrEnum):
    SKIP = "skip"  # replaced by the next readable sample of the split, and counted (metric bad_samples)
    FAIL = "fail"  # the job fails, naming the file


def _ordered_pair(values: list[float], field: str) -> list[float]:
    low, high = values
    if low > high:
        raise ValueError(f"{field} is [low, high], got [{low}, {high}]; put the smaller one first")
    return values


class RandomResizedCrop(Section):
    """A crop of random area and aspect ratio, resized to data.image_size (torchvision's
    RandomResizedCrop)."""

    scale: list[Fraction] = Field(
        default_factory=lambda: [0.08, 1.0],
        min_length=2,
        max_length=2,
        description="[low, high]: the crop's share of the image's area",
    )
    ratio: list[AspectRatio] = Field(
        default_factory=lambda: [3 / 4, 4 / 3],
        min_length=2,
        max_length=2,
        description="[low, high]: the crop's width / height",
    )

    @field_validator("scale")
    @classmethod
    def scale_range(cls, scale: list[float]) -> list[float]:
        return _ordered_pair(scale, "data.augment.random_resized_crop.scale")

    @field_validator("ratio")
    @classmethod
    def ratio_range(cls, ratio: list[float]) -> list[float]:
        return _ordered_pair(ratio, "data.augment.random_resized_crop.ratio")

    @property
    def log_ratio(self) -> tuple[float, float]:
        return math.log(self.ratio[0]), math.log(self.ratio[1])


class Normalize(Section):
    """Per channel: (pixel / 255 - mean) / std."""

    mean: list[Pixel] = Field(min_length=1, max_length=4, description="one per channel, or one for all")
    std: list[Spread] = Field(min_length=1, max_length=4, description="one per channel, or one for all")

    @model_validator(mode="after")
    def same_length(self) -> Normalize:
        if len(self.mean) != len(self.std):
            raise ValueError(
                f"data.augment.normalize has {len(self.mean)} mean(s) and {len(self.std)} std(s); give as "
                "many of each"
            )
        return self


class AugmentSpec(Section):
    """Training images are augmented on the device, a batch at a time, with randomness drawn from
    (train.seed, rank, step): the same seed gives the same augmentation, a resumed job included. Evaluation
    sees the middle data.image_size square, normalised alike."""

    random_resized_crop: RandomResizedCrop | None = Field(None, description="off unless given")
    hflip: float = Field(0.0, ge=0.0, le=1.0, description="probability of a horizontal flip")
    normalize: Normalize | None = Field(
        None, description="default: the dataset's own mean and std (ImageNet's for image_folder and shards)"
    )
    mixup: float = Field(0.0, ge=0.0, le=10.0, description="Beta(a, a) of mixup; 0: off; cross_entropy only")
    cutmix: float = Field(
        0.0, ge=0.0, le=10.0, description="Beta(a, a) of cutmix; 0: off; with mixup, one of them per batch"
    )

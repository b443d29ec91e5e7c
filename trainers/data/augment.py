"""data.augment, applied on the device to whole uint8 batches: never per sample on the CPU.

Training: a random resized crop and a horizontal flip per sample, both as one affine resampling of the batch
(affine_grid + grid_sample), then normalisation, then mixup or cutmix across the batch. Evaluation: the
middle data.image_size square, normalised alike. The randomness of a micro-batch comes from generators
seeded by (train.seed, rank, step, micro-step): the same seed augments alike, and a resumed job repeats
exactly what an uninterrupted one would have drawn, with no RNG state to store.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from jobspec.catalog.datasets import DATASETS
from jobspec.spec import JobSpec
from jobspec.spec_augment import AugmentSpec, RandomResizedCrop
from trainers.data import BatchShape, Pair, View
from trainers.data.batches import Batch

ATTEMPTS = 10  # torchvision's: crops drawn per sample until one fits the image


def seeded(device: torch.device, *key: int) -> torch.Generator:
    """A generator on `device` whose stream depends on `key` alone."""
    return torch.Generator(device).manual_seed(hash(key) & 0x7FFF_FFFF_FFFF_FFFF)


@dataclass(frozen=True)
class Boxes:
    """Per sample, as shares of the (square) image: crop width, height, left and top edges, and a flip."""

    width: torch.Tensor
    height: torch.Tensor
    left: torch.Tensor
    top: torch.Tensor
    flip: torch.Tensor  # bool

    def theta(self) -> torch.Tensor:
        """The affine maps from the output grid to the crop, in affine_grid's [-1, 1] coordinates."""
        sign = 1.0 - 2.0 * self.flip.float()
        zero = torch.zeros_like(self.width)
        center_x = 2 * self.left + self.width - 1
        center_y = 2 * self.top + self.height - 1
        rows = [
            torch.stack([self.width * sign, zero, center_x], dim=1),
            torch.stack([zero, self.height, center_y], dim=1),
        ]
        return torch.stack(rows, dim=1)


def _uniform(generator: torch.Generator, low: float, high: float, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=generator, device=generator.device) * (high - low) + low


def sample_flips(count: int, hflip: float, generator: torch.Generator) -> torch.Tensor:
    return _uniform(generator, 0, 1, count) < hflip


def sample_boxes(count: int, crop: RandomResizedCrop, hflip: float, generator: torch.Generator) -> Boxes:
    """torchvision's RandomResizedCrop, for a batch of square images at once: up to ATTEMPTS draws of area
    and log-uniform aspect ratio per sample, the first that fits the image kept; none fitting, the whole
    image cropped to the nearest allowed ratio."""
    (low_area, high_area), (low_ratio, high_ratio) = crop.scale, crop.log_ratio
    area = _uniform(generator, low_area, high_area, count, ATTEMPTS)
    ratio = torch.exp(_uniform(generator, low_ratio, high_ratio, count, ATTEMPTS))
    widths, heights = torch.sqrt(area * ratio), torch.sqrt(area / ratio)
    fits = (widths <= 1) & (heights <= 1)
    first = fits.int().argmax(dim=1, keepdim=True)  # the first that fits, or 0 when none does
    nearest = min(max(1.0, crop.ratio[0]), crop.ratio[1])  # the allowed width / height closest to 1
    any_fit = fits.any(dim=1)
    width = torch.where(any_fit, widths.gather(1, first).squeeze(1), min(1.0, nearest))
    height = torch.where(any_fit, heights.gather(1, first).squeeze(1), min(1.0, 1.0 / nearest))
    left = _uniform(generator, 0, 1, count) * (1 - width)
    top = _uniform(generator, 0, 1, count) * (1 - height)
    return Boxes(width, height, left, top, sample_flips(count, hflip, generator))


class Normalise:
    """(pixel / 255 - mean) / std per channel, for uint8 or float pixels of 0..255."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...], device: torch.device) -> None:
        self.shift = torch.tensor(mean, device=device).mul(255.0).view(1, -1, 1, 1)
        self.scale = torch.tensor(std, device=device).mul(255.0).view(1, -1, 1, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.shift.shape[1] not in (1, x.shape[1]):
            raise ValueError(
                f"data.augment.normalize gives {self.shift.shape[1]} means for images of {x.shape[1]} "
                f"channel(s); give one value for every channel, or {x.shape[1]}"
            )
        return (x.float() - self.shift) / self.scale


def middle(x: torch.Tensor, side: int) -> torch.Tensor:
    """The middle side x side square of a batch, or the batch itself when it is no larger."""
    offset = (x.shape[-1] - side) // 2
    return x[..., offset : offset + side, offset : offset + side] if offset > 0 else x


@dataclass(frozen=True)
class EvalView:
    """Held-out batches: the middle square, normalised as training batches are, shaped for the model."""

    shape: BatchShape
    normalise: Normalise

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        return self.shape.apply(self.normalise(middle(x, self.shape.image_size)))


def _mix(
    x: torch.Tensor, y: torch.Tensor, spec: AugmentSpec, classes: int, rng: np.random.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixup or cutmix with the batch rolled by one (torchvision's pairing); labels become class shares."""
    choices = [name for name, alpha in (("mixup", spec.mixup), ("cutmix", spec.cutmix)) if alpha]
    which = choices[int(rng.integers(len(choices)))]
    alpha = spec.mixup if which == "mixup" else spec.cutmix
    share = float(rng.beta(alpha, alpha))
    other_x, targets = x.roll(1, 0), F.one_hot(y, classes).float()
    if which == "mixup":
        mixed = x * share + other_x * (1 - share)
    else:
        side = x.shape[-1]
        cut = round(side * math.sqrt(1 - share))
        top, left = (int(v) for v in rng.integers(0, side - cut + 1, size=2))
        mixed = x.clone()
        mixed[..., top : top + cut, left : left + cut] = other_x[..., top : top + cut, left : left + cut]
        share = 1 - cut * cut / (side * side)
    return mixed, targets * share + targets.roll(1, 0) * (1 - share)


@dataclass(frozen=True)
class TrainAugment:
    """Training batches: crop and flip, normalise, mix, shaped for the model."""

    spec: AugmentSpec
    shape: BatchShape
    normalise: Normalise
    classes: int
    seed: int
    rank: int

    def __call__(self, x: torch.Tensor, y: torch.Tensor, step: int, micro: int) -> Pair:
        side, crop = self.shape.image_size, self.spec.random_resized_crop
        generator = seeded(x.device, self.seed, self.rank, step, micro)
        if crop is None:  # the middle square, as evaluation sees it, maybe flipped
            out = middle(x, side).float()
            flips = sample_flips(len(x), self.spec.hflip, generator).view(-1, 1, 1, 1)
            out = torch.where(flips, out.flip(-1), out)
        else:
            boxes = sample_boxes(len(x), crop, self.spec.hflip, generator)
            grid = F.affine_grid(boxes.theta(), [len(x), x.shape[1], side, side], align_corners=False)
            out = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="border", align_corners=False)
        out = self.normalise(out)
        if self.spec.mixup or self.spec.cutmix:
            rng = np.random.default_rng([self.seed, self.rank, step, micro])
            out, y = _mix(out, y, self.spec, self.classes, rng)
        return self.shape.apply(out), y


Transform = Callable[[torch.Tensor, torch.Tensor, int, int], Pair]  # (x, y, step, micro-step) -> (x, y)


def views(
    spec: JobSpec, shape: BatchShape, classes: int, rank: int, device: torch.device
) -> tuple[Transform, View]:
    """How training batches (with their step) and held-out batches become the model's inputs."""
    augment, dataset = spec.inputs.data.augment, spec.inputs.data.dataset
    if augment is None or dataset is None:
        return (lambda x, y, step, micro: (shape.prepare(x), y)), shape
    info = DATASETS[dataset]
    given = augment.normalize
    mean, std = (tuple(given.mean), tuple(given.std)) if given else (info.mean, info.std)
    normalise = Normalise(mean, std, device)
    train = TrainAugment(augment, shape, normalise, classes, spec.train.seed, rank)
    return train, EvalView(shape, normalise)


class Steps(Protocol):
    """Endless optimizer steps of micro-batches, as trainers/components.py's TrainSource."""

    @property
    def steps_per_epoch(self) -> int: ...

    @property
    def per_rank_batch(self) -> int: ...

    def from_step(self, done: int) -> Iterator[list[Batch]]: ...


class Transformed:
    """Another source's steps, each micro-batch transformed with its step and micro-step."""

    def __init__(self, source: Steps, transform: Transform) -> None:
        self.source = source
        self.transform = transform

    @property
    def steps_per_epoch(self) -> int:
        return self.source.steps_per_epoch

    @property
    def per_rank_batch(self) -> int:
        return self.source.per_rank_batch

    def from_step(self, done: int) -> Iterator[list[Batch]]:
        for step, micro_batches in enumerate(self.source.from_step(done), start=done + 1):
            yield [self.transform(x, y, step, micro) for micro, (x, y) in enumerate(micro_batches)]

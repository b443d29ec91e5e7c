"""data.augment on whole batches: deterministic per (seed, rank, step, micro-step), crops and flips drawn as
configured, evaluation not augmented, labels mixed by mixup and cutmix in the shares the images are."""

from __future__ import annotations

import math

import pytest
import torch

from jobspec.spec_augment import AugmentSpec, RandomResizedCrop
from trainers.data import BatchShape
from trainers.data.augment import EvalView, Normalise, TrainAugment, sample_boxes, seeded

CPU = torch.device("cpu")
SHAPE = BatchShape(image_size=8, channels=3, channels_last=False)
PLAIN = Normalise((0.0,), (1 / 255,), CPU)  # pixels pass through as 0..255 floats


def augment(spec: AugmentSpec, seed: int = 0, rank: int = 0) -> TrainAugment:
    return TrainAugment(spec, SHAPE, PLAIN, classes=4, seed=seed, rank=rank)


def batch(count: int = 16, side: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.randint(0, 256, (count, 3, side, side), generator=torch.Generator().manual_seed(0))
    return images.to(torch.uint8), torch.arange(count) % 4


CROP_FLIP = AugmentSpec(random_resized_crop=RandomResizedCrop(), hflip=0.5)


def test_the_same_seed_rank_and_step_augment_alike_and_any_other_differs() -> None:
    x, y = batch()
    first = augment(CROP_FLIP)(x, y, step=7, micro=1)[0]
    assert torch.equal(first, augment(CROP_FLIP)(x, y, step=7, micro=1)[0])
    for other in (
        augment(CROP_FLIP)(x, y, step=8, micro=1)[0],
        augment(CROP_FLIP)(x, y, step=7, micro=0)[0],
        augment(CROP_FLIP, rank=1)(x, y, step=7, micro=1)[0],
        augment(CROP_FLIP, seed=1)(x, y, step=7, micro=1)[0],
    ):
        assert not torch.equal(first, other)
    assert first.shape == (16, 3, 8, 8) and first.dtype == torch.float32


def test_crops_and_flips_follow_the_configured_ranges_and_probability() -> None:
    crop = RandomResizedCrop(scale=[0.25, 0.5], ratio=[0.5, 2.0])
    boxes = sample_boxes(4000, crop, hflip=0.3, generator=seeded(CPU, 3))
    area, ratio = boxes.width * boxes.height, boxes.width / boxes.height
    assert area.min() >= 0.25 - 1e-6 and area.max() <= 0.5 + 1e-6
    assert ratio.min() >= 0.5 - 1e-6 and ratio.max() <= 2.0 + 1e-6
    assert (boxes.left >= 0).all() and (boxes.left + boxes.width <= 1 + 1e-6).all()
    assert (boxes.top >= 0).all() and (boxes.top + boxes.height <= 1 + 1e-6).all()
    assert abs(boxes.flip.float().mean().item() - 0.3) < 0.03
    # Log-uniform ratios: as many crops wider than tall as taller than wide.
    assert abs((ratio > 1).float().mean().item() - 0.5) < 0.04


def test_crops_that_cannot_fit_fall_back_to_the_whole_image_at_the_nearest_ratio() -> None:
    crop = RandomResizedCrop(scale=[1.0, 1.0], ratio=[2.0, 3.0])  # all of the area at 2:1 never fits
    boxes = sample_boxes(10, crop, hflip=0.0, generator=seeded(CPU, 0))
    assert torch.allclose(boxes.width, torch.ones(10)) and torch.allclose(
        boxes.height, torch.full((10,), 0.5)
    )


def test_a_flip_without_a_crop_mirrors_the_middle_square_exactly() -> None:
    x, y = batch(count=64)
    out = augment(AugmentSpec(hflip=0.5))(x, y, step=1, micro=0)[0]
    middle = x[..., 2:10, 2:10].float()
    flipped = [torch.equal(o, m.flip(-1)) for o, m in zip(out, middle, strict=True)]
    kept = [torch.equal(o, m) for o, m in zip(out, middle, strict=True)]
    assert all(f or k for f, k in zip(flipped, kept, strict=True))
    assert 16 < sum(flipped) < 48


def test_evaluation_sees_the_middle_square_normalised_never_augmented() -> None:
    x, _ = batch(count=4)
    normalise = Normalise((0.5, 0.25, 0.0), (0.5, 0.5, 1.0), CPU)
    out = EvalView(SHAPE, normalise).prepare(x)
    middle = x[..., 2:10, 2:10].float() / 255
    expected = (middle - torch.tensor([0.5, 0.25, 0.0]).view(1, 3, 1, 1)) / torch.tensor(
        [0.5, 0.5, 1.0]
    ).view(1, 3, 1, 1)
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.equal(out, EvalView(SHAPE, normalise).prepare(x))


@pytest.mark.parametrize("mix", ["mixup", "cutmix"])
def test_mixing_gives_labels_the_shares_of_the_images(mix: str) -> None:
    x = torch.zeros(4, 3, 8, 8, dtype=torch.uint8)
    x[1::2] = 255  # alternate black and white images: a pixel's share of white is its label's share
    y = torch.tensor([0, 1, 0, 1])
    out, soft = augment(AugmentSpec(**{mix: 1.0}))(x, y, step=3, micro=0)
    assert soft.shape == (4, 4) and torch.allclose(soft.sum(1), torch.ones(4))
    white = out.mean(dim=(1, 2, 3)) / 255
    assert torch.allclose(white, soft[:, 1], atol=1e-5)
    assert not math.isclose(white[0].item(), 0.0)


def test_normalise_refuses_means_that_do_not_fit_the_channels() -> None:
    with pytest.raises(ValueError, match="give one value for every channel, or 3"):
        Normalise((0.1, 0.2), (1.0, 1.0), CPU)(torch.zeros(1, 3, 2, 2))


def test_each_sample_shows_its_own_box_flipped_where_drawn() -> None:
    side = 64
    columns = torch.arange(side, dtype=torch.float32).expand(16, 3, side, side)
    spec = AugmentSpec(random_resized_crop=RandomResizedCrop(scale=[0.2, 0.3], ratio=[1.0, 1.0]), hflip=0.5)
    out, _ = augment(spec)(columns.to(torch.uint8), torch.zeros(16, dtype=torch.int64), step=2, micro=0)
    boxes = sample_boxes(16, spec.random_resized_crop, 0.5, seeded(CPU, 0, 0, 2, 0))  # as the call drew them
    middle_column = (boxes.left + boxes.width / 2) * side - 0.5
    assert torch.allclose(out.mean(dim=(1, 2, 3)), middle_column, atol=0.3)
    rising = out[:, 0, 0, -1] > out[:, 0, 0, 0]
    assert torch.equal(rising, ~boxes.flip) and 0 < boxes.flip.sum() < 16

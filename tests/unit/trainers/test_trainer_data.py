"""Datasets load seeded and whole; each rank gets a disjoint equal shard, shaped on the device per batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from jobspec.spec import DataSpec
from trainers.data import BatchShape, DeviceFeeder, TrainBatches, digits, load_dataset
from trainers.data.held_out import ResidentHeldOut
from trainers.dist_env import DistEnv

CPU = torch.device("cpu")


def rank(r: int, world: int = 2) -> DistEnv:
    return DistEnv(rank=r, local_rank=r, world_size=world, device=CPU)


def numbered(n: int) -> DeviceFeeder:
    """Sample i is the 1x1 image holding i, so a batch shows which samples it holds."""
    split = (torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1), torch.arange(n))
    return DeviceFeeder(split, BatchShape(image_size=1, channels=1, channels_last=False), CPU, CPU)


def ids(step: list[tuple[torch.Tensor, torch.Tensor]]) -> list[int]:
    return [int(i) for x, _ in step for i in x.flatten()]


def one_epoch(batches: TrainBatches, done: int = 0) -> list[list[int]]:
    steps = batches.from_step(done)
    return [ids(next(steps)) for _ in range(batches.steps_per_epoch - done % batches.steps_per_epoch)]


def test_two_ranks_get_disjoint_equal_shards() -> None:
    shards = [TrainBatches(numbered(103), rank(r), per_rank_batch=8, micro_batch=4, seed=3) for r in (0, 1)]
    seen = [[i for step in one_epoch(b) for i in step] for b in shards]
    assert shards[0].steps_per_epoch == shards[1].steps_per_epoch == 51 // 8
    assert len(seen[0]) == len(seen[1]) == 6 * 8
    assert not set(seen[0]) & set(seen[1])
    assert len(set(seen[0])) == len(seen[0])


def test_steps_split_into_micro_batches() -> None:
    batches = TrainBatches(numbered(64), rank(0, world=1), per_rank_batch=16, micro_batch=4, seed=0)
    step = next(batches.from_step(0))
    assert [len(y) for _, y in step] == [4, 4, 4, 4]


def test_epochs_are_reshuffled_and_reproducible() -> None:
    a = TrainBatches(numbered(64), rank(0, world=1), per_rank_batch=16, micro_batch=16, seed=5)
    b = TrainBatches(numbered(64), rank(0, world=1), per_rank_batch=16, micro_batch=16, seed=5)
    first, second = a.from_step(0), b.from_step(0)
    epochs_a = [[ids(next(first)) for _ in range(4)] for _ in range(2)]
    assert epochs_a == [[ids(next(second)) for _ in range(4)] for _ in range(2)]
    assert epochs_a[0] != epochs_a[1]


@pytest.mark.parametrize("done", [3, 4, 6])
def test_resuming_skips_exactly_the_steps_already_done(done: int) -> None:
    batches = TrainBatches(numbered(40), rank(1), per_rank_batch=5, micro_batch=5, seed=1)
    full = batches.from_step(0)
    expected = [ids(next(full)) for _ in range(done + 5)][done:]
    resumed = batches.from_step(done)
    assert [ids(next(resumed)) for _ in range(5)] == expected


def test_batch_larger_than_a_shard_asks_to_lower_the_batch_size() -> None:
    with pytest.raises(ValueError, match=r"batch_size=64 is larger than the 30 .* at most 30"):
        TrainBatches(numbered(31), rank(0), per_rank_batch=32, micro_batch=32, seed=0)


def test_eval_shards_cover_every_sample_once() -> None:
    feeder = numbered(11)
    shards = [list(ResidentHeldOut(feeder).shard(rank(r), 2, bool)) for r in (0, 1)]
    seen = [ids([batch for batch, counted in shard if counted]) for shard in shards]
    assert sorted(seen[0] + seen[1]) == list(range(11))


def test_batch_shape_resizes_and_expands_grayscale_on_the_batch() -> None:
    x = torch.rand(2, 1, 8, 8)
    out = BatchShape(image_size=32, channels=3, channels_last=True).apply(x)
    assert out.shape == (2, 3, 32, 32)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out[:, 0], out[:, 2])


def test_synthetic_is_seeded_and_sized_by_the_spec() -> None:
    spec = DataSpec(dataset="synthetic", num_samples=100, num_classes=4, channels=2, val_fraction=0.2)
    data, again = load_dataset(spec, seed=7), load_dataset(spec, seed=7)
    assert data.train[0].shape == (100, 2, 32, 32) and len(data.val[1]) == 20
    assert data.num_classes == 4 and set(data.train[1].tolist()) <= {0, 1, 2, 3}
    assert torch.equal(data.train[0], again.train[0])
    assert not torch.equal(data.train[0], load_dataset(spec, seed=8).train[0])


def test_synthetic_classes_are_separable_by_their_means() -> None:
    data = load_dataset(DataSpec(dataset="synthetic", num_samples=512, num_classes=4), seed=0)
    x, y = data.train
    means = torch.stack([x[y == c].mean(0) for c in range(4)])
    nearest = torch.cdist(data.val[0].flatten(1), means.flatten(1)).argmin(1)
    assert (nearest == data.val[1]).float().mean() > 0.9


def test_digits_split_is_stratified_and_normalised() -> None:
    data = load_dataset(DataSpec(dataset="digits", val_fraction=0.2), seed=0)
    (train_x, train_y), (_, val_y) = data.train, data.val
    assert train_x.shape[1:] == (1, 8, 8) and len(train_y) + len(val_y) == 1797
    assert len(val_y) == round(1797 * 0.2) and data.num_classes == 10
    assert torch.bincount(val_y, minlength=10).min() >= 34
    assert abs(train_x.mean().item()) < 1e-4 and abs(train_x.std().item() - 1) < 1e-3


def test_digits_read_from_scikit_learn_s_file_are_its_loader_s_and_split_by_seed() -> None:
    from sklearn.datasets import load_digits

    pixels, labels = digits._images_and_labels()
    shipped = load_digits()
    assert np.array_equal(pixels, shipped.data) and np.array_equal(labels, shipped.target)
    train, val = digits.stratified_split(labels, 0.3, seed=1)
    assert sorted([*train, *val]) == list(range(len(labels)))  # disjoint, and every image in one of them
    again = digits.stratified_split(labels, 0.3, seed=1)
    assert np.array_equal(train, again[0]) and np.array_equal(val, again[1])
    assert not np.array_equal(val, digits.stratified_split(labels, 0.3, seed=2)[1])


def test_digits_without_validation_keeps_every_sample_for_training() -> None:
    data = load_dataset(DataSpec(dataset="digits", val_fraction=0.0), seed=0)
    assert len(data.train[1]) == 1797 and len(data.val[1]) == 0

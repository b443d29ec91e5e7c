"""The built-in datasets, held whole as tensors, and per-rank batches cut from them on the device: the fast
path, with no loader processes and no host copies per step. A data.factory's datasets go through
DataLoaders instead (trainers/data/loader.py).

Each dataset module's `load(data, seed)` returns (train_x, train_y, val_x, val_y): float (or, read from
disk, uint8) images N x C x H x W and int64 labels. Everything after that (sharding, resizing, channel
expansion) happens here, per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, DistributedSampler

from jobspec.catalog.datasets import DATASETS, DatasetName
from jobspec.spec import DataPlacement, DataSpec
from trainers.data import bags, cifar10, digits, image_folder, mnist, shards, synthetic
from trainers.data.images import ImageSet
from trainers.dist_env import DistEnv

Pair = tuple[torch.Tensor, torch.Tensor]  # (images or token ids, labels)
Loader = Callable[[DataSpec, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Source:
    load: Loader
    num_classes: Callable[[DataSpec], int] | None = None  # None: the catalogue's fixed count
    # Image files, listed without decoding, to hold whole or stream (DatasetInfo.streams)
    images: Callable[[DataSpec, int], ImageSet] | None = None


# The loaders, keyed by the catalogue's DatasetName; what the planner knows of each is its DatasetInfo.
SOURCES: dict[DatasetName, Source] = {
    DatasetName.SYNTHETIC: Source(synthetic.load, lambda data: data.num_classes),
    DatasetName.DIGITS: Source(digits.load),
    DatasetName.CIFAR10: Source(cifar10.load),
    DatasetName.MNIST: Source(mnist.load),
    DatasetName.IMAGE_FOLDER: Source(image_folder.load, image_folder.num_classes, image_folder.open_set),
    DatasetName.SHARDS: Source(shards.load, shards.num_classes, shards.open_set),
    DatasetName.SYNTHETIC_BAGS: Source(bags.load, lambda data: data.num_classes),
}


@dataclass(frozen=True)
class LoadedData:
    train: Pair
    val: Pair
    num_classes: int

    @property
    def channels(self) -> int:
        return self.train[0].shape[1]

    @property
    def tokens(self) -> bool:
        """Bags of token ids (N x bag_size), not images (N x C x H x W)."""
        return self.train[0].dim() == 2

    @property
    def native_size(self) -> int:
        return self.train[0].shape[-1]


def num_classes(data: DataSpec) -> int:
    """The catalogue's count where it is fixed; else what the spec or the files say."""
    assert data.dataset is not None, "only the built-in datasets are catalogued"
    counted = SOURCES[data.dataset].num_classes
    if counted is not None:
        return counted(data)
    fixed = DATASETS[data.dataset].classes
    assert isinstance(fixed, int), f"{data.dataset}'s loader must count its classes: the catalogue has none"
    return fixed


def load_dataset(data: DataSpec, seed: int) -> LoadedData:
    if data.dataset is None:
        raise ValueError("load_dataset reads a built-in data.dataset; a data.factory's goes through a loader")
    train_x, train_y, val_x, val_y = SOURCES[data.dataset].load(data, seed)
    return LoadedData(train=(train_x, train_y), val=(val_x, val_y), num_classes=num_classes(data))


def storage_device(placement: DataPlacement, device: torch.device) -> torch.device:
    """Where the whole dataset lives: on the GPU unless the spec asks for CPU (e.g. it does not fit)."""
    return torch.device("cpu") if placement is DataPlacement.CPU else device


def as_float_images(x: torch.Tensor) -> torch.Tensor:
    """On-disk datasets stay uint8 (4x less memory) until here; fixed constants map 0..255 to about
    zero mean and unit spread, the same for training and held-out images."""
    if x.dtype != torch.uint8:
        return x
    return x.float().sub_(127.5).div_(64.0)


@dataclass(frozen=True)
class BatchShape:
    """What the model takes; applied to whole batches on the device, never per sample on the CPU."""

    image_size: int
    channels: int
    channels_last: bool

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            return x  # bags of token ids (N x bag_size) are not images: nothing to resize or expand
        if x.shape[-1] != self.image_size:
            size = (self.image_size, self.image_size)
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
        if x.shape[1] != self.channels:
            x = x.expand(-1, self.channels, -1, -1)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        """A batch as stored (uint8 or float) as the model takes it."""
        return self.apply(as_float_images(x))


class View(Protocol):
    """What a batch on the device becomes before the model sees it: BatchShape, or data.augment's views
    (trainers/data/augment.py)."""

    def prepare(self, x: torch.Tensor) -> torch.Tensor: ...


class AsStored:
    """Batches as stored, for data.augment to transform with the step's randomness."""

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        return x


class DeviceFeeder:
    """Moves index batches of a resident dataset to the compute device, prepared by `view`."""

    def __init__(self, split: Pair, view: View, device: torch.device, storage: torch.device) -> None:
        self.x, self.y = (t.to(storage) for t in split)
        self.view = view
        self.device = device
        # A host-to-GPU copy is only asynchronous from pinned memory, and indexing a tensor makes a new
        # pageable one, so each batch is gathered straight into (cached) pinned memory instead.
        self.pin = storage.type == "cpu" and device.type == "cuda"

    def __len__(self) -> int:
        return len(self.y)

    def _gather(self, t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        if not self.pin:
            return t.index_select(0, idx)
        out = torch.empty((len(idx), *t.shape[1:]), dtype=t.dtype, pin_memory=True)
        return torch.index_select(t, 0, idx, out=out)

    def fetch(self, idx: torch.Tensor) -> Pair:
        x = self._gather(self.x, idx).to(self.device, non_blocking=True)
        y = self._gather(self.y, idx).to(self.device, non_blocking=True)
        return self.view.prepare(x), y


class TrainBatches:
    """This rank's shard of every epoch, cut into optimizer steps of accumulation micro-batches."""

    def __init__(
        self, feeder: DeviceFeeder, env: DistEnv, per_rank_batch: int, micro_batch: int, seed: int
    ) -> None:
        self.feeder = feeder
        self.per_rank_batch = per_rank_batch
        self.micro_batch = micro_batch
        # drop_last keeps every rank's shard the same length, so all ranks take the same number of steps.
        # Sampling positions needs only a length, so a range stands in for a Dataset.
        positions = cast("Dataset[int]", range(len(feeder)))
        self.sampler: DistributedSampler[int] = DistributedSampler(
            positions, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=seed, drop_last=True
        )
        self.steps_per_epoch = len(self.sampler) // per_rank_batch
        if self.steps_per_epoch == 0:
            usable = len(self.sampler) * env.world_size
            raise ValueError(
                f"train.batch_size={per_rank_batch * env.world_size} is larger than the {usable} training "
                f"samples the {env.world_size} rank(s) share; lower train.batch_size to at most {usable}"
            )

    def _epoch_indices(self, epoch: int) -> torch.Tensor:
        self.sampler.set_epoch(epoch)
        # One host-to-device copy per epoch; slicing it per step costs no sync.
        return torch.tensor(list(self.sampler), device=self.feeder.x.device)

    def from_step(self, done: int) -> Iterator[list[Pair]]:
        """Endless steps after `done` steps: the permutation of an epoch depends only on (seed, epoch)."""
        epoch, skip = divmod(done, self.steps_per_epoch)
        while True:
            indices = self._epoch_indices(epoch)
            for step in range(skip, self.steps_per_epoch):
                batch = indices[step * self.per_rank_batch : (step + 1) * self.per_rank_batch]
                yield [self.feeder.fetch(idx) for idx in batch.split(self.micro_batch)]
            epoch, skip = epoch + 1, 0

"""The held-out split, sharded over the ranks for evaluation so that every sample counts exactly once.

Each rank yields (batch, counted) pairs. Every rank runs as many forwards as the rank with the most batches:
a forward that is itself a collective (FSDP's all-gathers) must run equally often everywhere, so a rank that
runs out repeats a batch it has, uncounted (a user's model may not take an empty batch).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sized
from typing import Any, Protocol, cast

import torch
from torch.utils.data import Dataset, IterableDataset

from trainers.data import DeviceFeeder
from trainers.data.batches import Batch
from trainers.data.loader import ShardedStream, data_loader, device_batches
from trainers.data.user import UserData
from trainers.dist_env import DistEnv

AnyLeft = Callable[
    [bool], bool
]  # whether any rank still has a batch, given this rank's answer (a collective)
Shard = Iterator[tuple[Batch, bool]]


class HeldOut(Protocol):
    @property
    def empty(self) -> bool: ...

    def shard(self, env: DistEnv, batch_size: int, any_left: AnyLeft) -> Shard: ...


def padded(batches: Iterator[Batch], total: int, spare: Callable[[], Batch]) -> Shard:
    """`batches` counted, then uncounted repeats of the first (or of `spare` when there was none) up to
    `total` forwards."""
    first, count = None, 0
    for batch in batches:
        first = batch if first is None else first
        count += 1
        yield batch, True
    for _ in range(total - count):
        yield (spare() if first is None else first), False


class ResidentHeldOut:
    """A built-in dataset's held-out split, resident on the device: strided index shards per rank."""

    def __init__(self, feeder: DeviceFeeder) -> None:
        self.feeder = feeder

    @property
    def empty(self) -> bool:
        return len(self.feeder) == 0

    def shard(self, env: DistEnv, batch_size: int, any_left: AnyLeft) -> Shard:
        count = len(self.feeder)
        # min: a rank past the last sample (more ranks than samples) gets an empty shard.
        indices = torch.arange(min(env.rank, count), count, env.world_size, device=self.feeder.x.device)
        total = math.ceil(math.ceil(count / env.world_size) / batch_size)
        first = indices.new_zeros(1)
        # An empty tensor splits into one empty chunk: a rank without samples has no batch of its own.
        chunks = (self.feeder.fetch(idx) for idx in indices.split(batch_size) if len(idx))
        return padded(chunks, total, lambda: self.feeder.fetch(first))


class LoaderHeldOut:
    """A data.factory's held-out split through a DataLoader. Map-style: strided index shards, whose batch
    counts are known; an IterableDataset's shards are not, so the ranks agree after each batch whether any
    still has one."""

    def __init__(self, data: UserData, workers: int, device: torch.device) -> None:
        self.data = data
        self.workers = workers
        self.device = device

    @property
    def empty(self) -> bool:
        val = self.data.val
        return val is None or (not isinstance(val, IterableDataset) and len(cast(Sized, val)) == 0)

    def _batches(self, dataset: Dataset[Any], batch_size: int, **options: Any) -> Iterator[Batch]:
        loader = data_loader(self.data, dataset, batch_size, self.workers, self.device, **options)
        return device_batches(self.data, loader, self.device)

    def shard(self, env: DistEnv, batch_size: int, any_left: AnyLeft) -> Shard:
        val = self.data.val
        if val is None:
            return iter(())
        if isinstance(val, IterableDataset):
            stream = ShardedStream(val, env.rank, env.world_size)
            return self._agreed(self._batches(stream, batch_size), any_left)
        count = len(cast(Sized, val))
        total = math.ceil(math.ceil(count / env.world_size) / batch_size)
        shard = self._batches(val, batch_size, sampler=range(env.rank, count, env.world_size))
        return padded(shard, total, lambda: next(self._batches(val, 1, sampler=[0])))

    def _agreed(self, batches: Iterator[Batch], any_left: AnyLeft) -> Shard:
        first = None
        while True:
            batch = next(batches, None)
            if not any_left(batch is not None):
                return
            if batch is None and first is None:
                raise ValueError(
                    f"data.factory {self.data.entry!r}'s held-out IterableDataset gave this rank no batch "
                    "while others had some; yield at least one batch per rank and loader worker"
                )
            first = batch if first is None else first
            yield (first, False) if batch is None else (batch, True)

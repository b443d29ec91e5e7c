"""A data.factory's datasets through DataLoaders: loader workers read ahead (prefetch) into pinned memory on
CUDA jobs, so host-to-device copies are asynchronous; a map-style dataset's epoch can start at any position
of its seeded DistributedSampler order; an IterableDataset's stream is sharded by rank and loader worker
(item i goes to shard i mod ranks x workers). Training steps are trainers/data/steps.py, evaluation shards
trainers/data/held_out.py.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    Sampler,
    get_worker_info,
)

from trainers.data.batches import Batch, to_device
from trainers.data.user import UserData

# A worker process that died (the kernel's OOM killer, a segfault in an extension) is not the data's fault.
_WORKER_DIED = "DataLoader worker (pid"


class StopSafeWorkers:
    """A loader's worker_init_fn (then the user's own, if given): its workers ignore SIGTERM. A cancel or a
    runtime limit signals every process of the job, and torch's worker loop dies on a SIGTERM its rank did not
    send; the rank then fails on the lost worker before it reaches the final checkpoint the stop asks for. The
    rank ends its workers itself once it saved, and SIGKILL still ends any left past the grace period."""

    def __init__(self, then: Callable[[int], None] | None = None) -> None:
        self.then = then  # an instance's attribute, not a closure: spawned workers unpickle it

    def __call__(self, worker_id: int) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if self.then is not None:
            self.then(worker_id)


def stop_safe(options: dict[str, Any]) -> dict[str, Any]:
    """DataLoader options whose workers outlive a stop's SIGTERM (StopSafeWorkers)."""
    return {**options, "worker_init_fn": StopSafeWorkers(options.get("worker_init_fn"))}


class ResumableSampler(Sampler[int]):
    """A DistributedSampler's epoch, from a given position on."""

    def __init__(self, sampler: DistributedSampler[Any]) -> None:
        self.sampler = sampler
        self.skip = 0

    def start(self, epoch: int, skip: int) -> None:
        self.sampler.set_epoch(epoch)
        self.skip = skip

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.sampler), self.skip, None)

    def __len__(self) -> int:
        return len(self.sampler) - self.skip


class ShardedStream(IterableDataset[Any]):
    """One rank's, one loader worker's share of an IterableDataset's stream."""

    def __init__(self, dataset: IterableDataset[Any], rank: int, world_size: int) -> None:
        self.dataset = dataset
        self.rank = rank
        self.world_size = world_size

    def set_epoch(self, epoch: int) -> None:
        """Passed on to the dataset, which may reshuffle per pass."""
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        worker = get_worker_info()
        workers, index = (1, 0) if worker is None else (worker.num_workers, worker.id)
        shard, shards = self.rank * workers + index, self.world_size * workers
        return itertools.islice(iter(self.dataset), shard, None, shards)


def data_loader(
    data: UserData, dataset: Dataset[Any], batch_size: int, workers: int, device: torch.device, **options: Any
) -> DataLoader[Any]:
    return DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=data.collate,
        pin_memory=device.type == "cuda",
        prefetch_factor=2 if workers else None,
        **stop_safe(options),
    )


def read_batches(data: UserData, loader: DataLoader[Any]) -> Iterator[Batch]:
    """The loader's batches, on the host. What fails while reading one is the dataset's fault (its
    __getitem__ or __iter__, its collate), and fails the job as such."""
    batches = iter(loader)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except Exception as exc:
            if _WORKER_DIED in str(exc):
                raise
            raise data.failed(exc) from exc
        yield batch


def device_batches(data: UserData, loader: DataLoader[Any], device: torch.device) -> Iterator[Batch]:
    # From pinned memory (CUDA jobs) the copy is asynchronous: the next batch is read while this one trains.
    return (to_device(batch, device, non_blocking=True) for batch in read_batches(data, loader))

"""A data.factory's training split as the loop takes it: this rank's shard of each epoch, in optimizer steps
of accumulation micro-batches on the device, from any step on.

A map-style dataset's epoch order depends only on (seed, epoch), so a run resumed after `done` steps starts
epoch done // steps_per_epoch that many steps in, reading none of the skipped samples, and sees exactly the
samples it would have. An IterableDataset has no index to start from: a resumed run replays its stream and
drops the batches already trained on, which gives the same samples when the stream yields the same items
in the same order each time. Its length is unknown, so a run over one is train.max_steps long.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler, IterableDataset

from jobspec.problems import refuse
from trainers.data.batches import Batch, to_device
from trainers.data.loader import ResumableSampler, ShardedStream, data_loader, read_batches
from trainers.data.user import UserData
from trainers.dist_env import DistEnv


@dataclass(frozen=True)
class Batching:
    """How a rank reads: samples per optimizer step and per micro-step, seed, loader workers, device."""

    per_rank_batch: int
    micro_batch: int
    seed: int
    workers: int
    device: torch.device


class LoaderSteps(ABC):
    """Endless optimizer steps of a factory's training split, served as TrainBatches serves a resident one."""

    steps_per_epoch: int

    def __init__(
        self, data: UserData, source: Dataset[Any], env: DistEnv, batching: Batching, **options: Any
    ):
        self.data = data
        self.batching = batching
        self.per_rank_batch = batching.per_rank_batch
        self.accumulation = batching.per_rank_batch // batching.micro_batch
        self.rank = env.rank
        # Loader workers' seeds are drawn from this generator, never from the global RNG that a checkpoint
        # restores: a loader started at another moment must not shift the model's random stream.
        self.generator = torch.Generator()
        micro, workers, device = batching.micro_batch, batching.workers, batching.device
        self.loader = data_loader(
            data, source, micro, workers, device, drop_last=True, generator=self.generator, **options
        )

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """An epoch (a pass of a stream) of micro-batches, on the host."""
        # Worker seeds per (seed, rank, epoch), which hash alike in every process: randomness drawn in loader
        # workers repeats with the epoch.
        self.generator.manual_seed(hash((self.batching.seed, self.rank, epoch)) & 0x7FFF_FFFF_FFFF_FFFF)
        return read_batches(self.data, self.loader)

    @abstractmethod
    def from_step(self, done: int) -> Iterator[list[Batch]]:
        """Endless steps after `done` steps."""

    def on_device(self, batch: Batch) -> Batch:
        # From pinned memory (CUDA jobs) the copy is asynchronous: the next batch is read as this one trains.
        return to_device(batch, self.batching.device, non_blocking=True)


class SampledSteps(LoaderSteps):
    def __init__(self, data: UserData, env: DistEnv, batching: Batching) -> None:
        # drop_last: every rank's shard is equally long, so all ranks take the same number of steps.
        self.sampler = ResumableSampler(
            DistributedSampler(
                data.train, env.world_size, env.rank, shuffle=True, seed=batching.seed, drop_last=True
            )
        )
        super().__init__(data, data.train, env, batching, sampler=self.sampler)
        self.steps_per_epoch = len(self.sampler) // batching.per_rank_batch
        if self.steps_per_epoch == 0:
            usable = len(self.sampler) * env.world_size
            raise ValueError(
                f"train.batch_size={batching.per_rank_batch * env.world_size} is larger than the {usable} "
                f"training samples {data.source} gives {env.world_size} rank(s); lower "
                "train.batch_size"
            )

    def from_step(self, done: int) -> Iterator[list[Batch]]:
        """Endless steps after `done` steps."""
        epoch, skip = divmod(done, self.steps_per_epoch)
        while True:
            self.sampler.start(epoch, skip * self.per_rank_batch)
            batches = self.epoch(epoch)
            for _ in range(skip, self.steps_per_epoch):
                yield [self.on_device(next(batches)) for _ in range(self.accumulation)]
            epoch, skip = epoch + 1, 0


class StreamSteps(LoaderSteps):
    def __init__(self, data: UserData, env: DistEnv, batching: Batching, max_steps: int) -> None:
        assert isinstance(data.train, IterableDataset)
        self.stream = ShardedStream(data.train, env.rank, env.world_size)
        super().__init__(data, self.stream, env, batching)
        self.steps_per_epoch = max_steps  # its length is unknown: the run is one epoch

    def from_step(self, done: int) -> Iterator[list[Batch]]:
        """Endless steps after `done` steps; the batches replayed to get there never reach the device."""
        skip, step, epoch = done * self.accumulation, [], 0
        while True:
            self.stream.set_epoch(epoch)
            seen = 0
            for batch in self.epoch(epoch):
                seen += 1
                if seen <= skip:
                    continue
                step.append(self.on_device(batch))
                if len(step) == self.accumulation:
                    yield step
                    step = []
            if seen == 0:
                raise ValueError(
                    f"data.factory {self.data.entry!r}'s IterableDataset gave rank {self.rank} no batch of "
                    f"{self.batching.micro_batch} samples; yield more items, or lower train.batch_size"
                )
            skip, epoch = max(0, skip - seen), epoch + 1


def loader_steps(data: UserData, env: DistEnv, batching: Batching, max_steps: int | None) -> LoaderSteps:
    """The training steps of a factory's dataset, map-style or a stream."""
    if not isinstance(data.train, IterableDataset):
        return SampledSteps(data, env, batching)
    if max_steps is None:
        raise refuse(
            "train.max_steps",
            f"data.factory {data.entry!r} returned an IterableDataset, whose length is unknown",
            "set train.max_steps",
        )
    return StreamSteps(data, env, batching, max_steps)

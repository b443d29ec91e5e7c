"""The one clock both loops use: warm up, then time N steps between two synchronisation points."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bench.result import Result, emit
from bench.runtime import Rank, device_name


@dataclass(frozen=True)
class Measurement:
    images_per_s: float  # global: every rank's images
    peak_mem_mb: float | None  # the largest rank's peak since the process started; None on the CPU
    seconds: float


def _settle(rank: Rank) -> None:
    """Wait for every queued kernel on this rank, then for every rank: the clock must not start or stop
    while work is still in flight anywhere."""
    if rank.device.type == "cuda":
        torch.cuda.synchronize(rank.device)
    if rank.distributed:
        dist.barrier()


def _max_over_ranks(values: list[float], rank: Rank) -> list[float]:
    if not rank.distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=rank.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [float(v) for v in tensor.tolist()]


def measure(
    step: Callable[[], None], *, warmup: int, steps: int, batch_per_rank: int, rank: Rank
) -> Measurement:
    """Run `warmup` untimed steps, then `steps` timed ones.

    perf_counter between synchronisations times what a user waits for, host-bound loops included, and is the
    same code on the CPU. The memory peak covers the whole run, warm-up included, because that is what the
    Trainyard trainer reports as peak_mem_mb: the rows of the table stay comparable.
    """
    for _ in range(warmup):
        step()
    _settle(rank)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _settle(rank)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(rank.device) / 2**20 if rank.device.type == "cuda" else 0.0
    # The slowest rank sets the pace of a synchronous data-parallel step.
    seconds, peak = _max_over_ranks([seconds, peak], rank)
    images = steps * batch_per_rank * rank.world_size
    return Measurement(
        images_per_s=images / seconds,
        peak_mem_mb=peak if rank.device.type == "cuda" else None,
        seconds=seconds,
    )


def report(variant: str, measurement: Measurement, rank: Rank, final_loss: float) -> None:
    """Rank 0 prints the one result line `bench.run` reads."""
    if rank.is_main:
        emit(
            Result(
                variant=variant,
                images_per_s=measurement.images_per_s,
                peak_mem_mb=measurement.peak_mem_mb,
                device=device_name(rank.device),
                world_size=rank.world_size,
                final_loss=final_loss,
            )
        )

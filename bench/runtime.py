"""What both loops set up alike: the process's place in the torchrun world, and the model."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torchvision import models

from bench.workload import NUM_CLASSES


@dataclass(frozen=True)
class Rank:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 alone prints the result."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@contextmanager
def joined(device_type: str) -> Iterator[Rank]:
    """Join torchrun's process group (a plain `python -m` is a world of one) and leave it on the way out."""
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if device_type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is visible; run on the GPU machine, or pass --smoke for the CPU")
    device = torch.device("cuda", local_rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        # A CPU rank's share of a small shared box, as the worker gives a job's CPU rank (OMP_NUM_THREADS=1):
        # with a thread per core, a loaded box's threads spin-wait at every op, and a --smoke ResNet-50 step
        # cost 4 CPU-s instead of 0.3.
        torch.set_num_threads(1)
    if world_size > 1:
        # Binding the group to this rank's GPU lets barriers know which device to use.
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    try:
        yield Rank(rank=rank, world_size=world_size, device=device)
    finally:
        if world_size > 1:
            dist.destroy_process_group()


def build_model(arch: str) -> nn.Module:
    """torchvision's architecture with random weights: weights=None never downloads anything."""
    constructor = {"alexnet": models.alexnet, "resnet50": models.resnet50}[arch]
    model: nn.Module = constructor(weights=None, num_classes=NUM_CLASSES)
    return model


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def data_parallel(model: nn.Module, rank: Rank, *, gradient_as_bucket_view: bool) -> nn.Module:
    """DDP across the torchrun world; a world of one keeps the bare model, as a single-GPU script would."""
    if not rank.distributed:
        return model
    device_ids = [rank.device.index] if rank.device.type == "cuda" else None
    return DistributedDataParallel(
        model, device_ids=device_ids, gradient_as_bucket_view=gradient_as_bucket_view
    )

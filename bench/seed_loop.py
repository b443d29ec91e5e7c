"""The baseline: a training loop in the style of the seed articles, fed the way they feed it.

Every image is decoded into a PIL image, resized and normalised on the CPU one sample at a time, in the
training process itself (num_workers=0), copied to the GPU per batch, and the loss is read back with .item()
every step (after an all-reduce under DDP), which stalls the host until the GPU has finished the step.
Single process with `python -m bench.seed_loop`, DDP under torchrun.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import torch
import torch.distributed as dist
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler
from torchvision import transforms

from bench.runtime import Rank, build_model, data_parallel, joined
from bench.timing import measure, report
from bench.workload import (
    LR,
    MEAN,
    MOMENTUM,
    NUM_CLASSES,
    SOURCE_SIZE,
    STD,
    Workload,
    add_workload_args,
    workload_from_args,
)

NUM_SAMPLES = 50_000  # CIFAR-10's training set size


class SyntheticCifar(Dataset[tuple[torch.Tensor, int]]):
    """Seeded random 32x32 RGB uint8 images with labels, handed to the transform as PIL images the way
    torchvision's CIFAR10 does, so the per-sample CPU cost is the articles'."""

    def __init__(self, transform: transforms.Compose, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        shape = (NUM_SAMPLES, SOURCE_SIZE, SOURCE_SIZE, 3)
        self.images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator).numpy()
        self.labels = torch.randint(0, NUM_CLASSES, (NUM_SAMPLES,), generator=generator).tolist()
        self.transform = transform

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image: torch.Tensor = self.transform(Image.fromarray(self.images[index]))
        return image, self.labels[index]


def cpu_transform(image_size: int) -> transforms.Compose:
    return transforms.Compose(
        [transforms.Resize(image_size), transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
    )


def endless_batches(workload: Workload, rank: Rank) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Epoch after epoch of the loader, so any step count fits."""
    dataset = SyntheticCifar(cpu_transform(workload.image_size))
    sampler: Sampler[int] = DistributedSampler(dataset) if rank.distributed else RandomSampler(dataset)
    loader = DataLoader(
        dataset, batch_size=workload.batch_per_rank, sampler=sampler, num_workers=0, drop_last=True
    )
    epoch = 0
    while True:
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def train(workload: Workload, rank: Rank, amp: bool) -> None:
    model = data_parallel(build_model(workload.arch).to(rank.device), rank, gradient_as_bucket_view=False)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    # The articles' fp16 recipe; disabled, the scaler passes the loss and step through untouched.
    scaler = torch.amp.GradScaler(rank.device.type, enabled=amp)
    batches = endless_batches(workload, rank)
    last_loss = float("nan")

    def step() -> None:
        nonlocal last_loss
        images, labels = next(batches)
        images, labels = images.to(rank.device), labels.to(rank.device)
        with torch.autocast(rank.device.type, dtype=torch.float16, enabled=amp):
            loss = criterion(model(images), labels)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        shown = loss.detach().clone()
        if rank.distributed:
            # The articles' reduce_tensor: every step, the mean loss over ranks, for logging.
            dist.all_reduce(shown)
            shown /= rank.world_size
        last_loss = shown.item()  # a host-device sync every step, as the articles' logging does

    measurement = measure(
        step, warmup=workload.warmup, steps=workload.steps, batch_per_rank=workload.batch_per_rank, rank=rank
    )
    variant = "seed loop (fp16 autocast + GradScaler)" if amp else "seed loop (fp32)"
    report(variant, measurement, rank, last_loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(parser)
    parser.add_argument("--amp", action="store_true", help="fp16 autocast with GradScaler instead of fp32")
    args = parser.parse_args()
    workload = workload_from_args(args)
    with joined(workload.device) as rank:
        train(workload, rank, args.amp)


if __name__ == "__main__":
    main()

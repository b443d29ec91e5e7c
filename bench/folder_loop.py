"""The hand-written baseline of bench.streaming: the loop a careful user writes over a JPEG folder with
torchvision alone, nothing of trainers/.

torchvision's ImageFolder decodes each file with PIL; RandomResizedCrop, RandomHorizontalFlip, ToTensor and
Normalize run per sample in DataLoader(num_workers=<cores - 2>, pin_memory=True, persistent_workers=True)
processes; batches go to the GPU with non_blocking copies; the model runs in bf16 autocast, channels_last,
with the loss read only after the clock stops. Prints bench.result's line and the timed window's wall-clock
bounds (WINDOW_PREFIX), which bench.streaming reads to average its CPU and GPU samples over.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms

from bench.runtime import Rank, joined
from bench.timing import measure, report
from bench.workload import (
    LR,
    MOMENTUM,
    WINDOW_PREFIX,
    Workload,
    add_workload_args,
    default_workers,
    workload_from_args,
)

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def batches(root: str, workload: Workload, workers: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    augment = transforms.Compose(
        [
            transforms.RandomResizedCrop(workload.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    loader = DataLoader(
        datasets.ImageFolder(root, transform=augment),
        batch_size=workload.batch_per_rank,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        pin_memory=workload.device == "cuda",
        persistent_workers=workers > 0,
    )
    while True:
        yield from loader


def train(root: str, workload: Workload, workers: int, rank: Rank) -> None:
    classes = len(datasets.folder.find_classes(root)[0])
    model = models.resnet50(weights=None, num_classes=classes).to(
        rank.device, memory_format=torch.channels_last
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    criterion = nn.CrossEntropyLoss()
    feed = batches(root, workload, workers)
    loss = torch.zeros((), device=rank.device)

    def step() -> None:
        nonlocal loss
        images, labels = next(feed)
        images = images.to(rank.device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        labels = labels.to(rank.device, non_blocking=True)
        with torch.autocast(rank.device.type, dtype=torch.bfloat16):
            loss = criterion(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    measurement = measure(
        step, warmup=workload.warmup, steps=workload.steps, batch_per_rank=workload.batch_per_rank, rank=rank
    )
    end = time.time()
    print(WINDOW_PREFIX + json.dumps([end - measurement.seconds, end]), flush=True)
    report(f"hand-written ImageFolder loop ({workers} workers)", measurement, rank, loss.item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(parser)
    parser.add_argument("--root", required=True, help="the JPEG folder (one subfolder per class)")
    parser.add_argument("--workers", type=int, default=default_workers())
    args = parser.parse_args()
    workload = workload_from_args(args)
    with joined(workload.device) as rank:
        train(args.root, workload, args.workers, rank)


if __name__ == "__main__":
    main()

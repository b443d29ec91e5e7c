"""What every variant trains: one model, image size and batch, so their throughputs can be compared.

No torch import: the parent `bench.run` builds the children's command lines from this alone.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

NUM_CLASSES = 10
# The stored images are CIFAR-sized; the seed loop resizes each one to the model's size on the CPU.
SOURCE_SIZE = 32
ARCHS = ("alexnet", "resnet50")
# Plain SGD with momentum everywhere, so the variants differ in how they feed and drive the step,
# not in the optimizer's arithmetic.
LR = 0.01
MOMENTUM = 0.9
# CIFAR-10's channel statistics, the Normalize of the articles' transform chain; the ceiling applies the same.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


@dataclass(frozen=True)
class Workload:
    arch: str
    image_size: int
    batch_per_rank: int
    warmup: int  # steps run before the clock starts: cudnn autotuning, torch.compile, allocator growth
    steps: int  # timed steps
    device: str  # "cuda", or "cpu" for --smoke


# arch -> (image size, batch per GPU). AlexNet takes 227 px as in the articles; ResNet-50 its usual 224.
GPU_SIZES = {"alexnet": (227, 256), "resnet50": (224, 256)}  # issue 4: ResNet-50 at 256 per GPU
# Just large enough for the architectures' pooling to leave a non-empty feature map.
SMOKE_SIZES = {"alexnet": (64, 8), "resnet50": (32, 4)}
GPU_WARMUP, GPU_STEPS = 20, 100
SMOKE_WARMUP, SMOKE_STEPS = 2, 3
# A hand-written loop prints its timed window's wall-clock bounds on a line of this prefix; its parent, which
# imports no torch, averages its CPU and GPU samples over them (bench.streaming).
WINDOW_PREFIX = "BENCH_WINDOW "


def default_workers() -> int:
    """Loader worker processes of a hand-written loop: the cores, less the main process's and one to spare."""
    return max(1, (os.cpu_count() or 2) - 2)


def preset(arch: str, *, smoke: bool, steps: int | None = None) -> Workload:
    """The sizes `bench.run` uses: real ones on the GPU, tiny ones on the CPU for --smoke."""
    if arch not in ARCHS:
        raise ValueError(f"unknown workload {arch!r}; choose one of {', '.join(ARCHS)}")
    image_size, batch = (SMOKE_SIZES if smoke else GPU_SIZES)[arch]
    default_steps = SMOKE_STEPS if smoke else GPU_STEPS
    return Workload(
        arch=arch,
        image_size=image_size,
        batch_per_rank=batch,
        warmup=SMOKE_WARMUP if smoke else GPU_WARMUP,
        steps=steps or default_steps,
        device="cpu" if smoke else "cuda",
    )


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", choices=ARCHS, required=True)
    parser.add_argument("--image-size", type=int, required=True)
    parser.add_argument("--batch-per-rank", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)


def workload_from_args(args: argparse.Namespace) -> Workload:
    return Workload(
        arch=args.arch,
        image_size=args.image_size,
        batch_per_rank=args.batch_per_rank,
        warmup=args.warmup,
        steps=args.steps,
        device=args.device,
    )


def workload_argv(workload: Workload) -> list[str]:
    """The inverse of `workload_from_args`: how the parent hands a workload to a child process."""
    return [
        "--arch",
        workload.arch,
        "--image-size",
        str(workload.image_size),
        "--batch-per-rank",
        str(workload.batch_per_rank),
        "--warmup",
        str(workload.warmup),
        "--steps",
        str(workload.steps),
        "--device",
        workload.device,
    ]

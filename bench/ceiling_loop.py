"""The ceiling: the fastest loop we know how to write by hand for the same model and batch.

The batches already live on the GPU (random uint8 images made there once; each step converts and normalises
one on the device, as a GPU-resident loader would), bf16 autocast, channels_last, fused SGD, cudnn autotuning,
optionally torch.compile, and nothing in the step makes the host wait for the device: the loss is read once,
after the clock stops. Single process with `python -m bench.ceiling_loop`, DDP under torchrun.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from bench.runtime import Rank, build_model, data_parallel, joined
from bench.timing import measure, report
from bench.workload import (
    LR,
    MEAN,
    MOMENTUM,
    NUM_CLASSES,
    STD,
    Workload,
    add_workload_args,
    workload_from_args,
)

# Distinct batches cycled through, so no step reuses the previous step's input; a handful is enough.
POOL = 4


def device_batches(workload: Workload, rank: Rank) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """POOL batches of uint8 images (channels_last, like the model) and labels, made on the device."""
    generator = torch.Generator(rank.device).manual_seed(rank.rank)
    shape = (workload.batch_per_rank, 3, workload.image_size, workload.image_size)
    images = [
        torch.randint(0, 256, shape, dtype=torch.uint8, device=rank.device, generator=generator).contiguous(
            memory_format=torch.channels_last
        )
        for _ in range(POOL)
    ]
    labels = [
        torch.randint(0, NUM_CLASSES, shape[:1], device=rank.device, generator=generator) for _ in range(POOL)
    ]
    return images, labels


def train(workload: Workload, rank: Rank, compile_model: bool) -> None:
    torch.backends.cudnn.benchmark = True  # the shapes never change, so autotuning pays for itself
    torch.set_float32_matmul_precision("high")  # TF32 for whatever autocast leaves in fp32
    model = build_model(workload.arch).to(rank.device).to(memory_format=torch.channels_last)
    model = data_parallel(model, rank, gradient_as_bucket_view=True)
    if compile_model:
        model = torch.compile(model)  # type: ignore[assignment]
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, fused=True)
    mean = torch.tensor(MEAN, device=rank.device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=rank.device).view(1, 3, 1, 1) * 255
    images, labels = device_batches(workload, rank)
    step_index = 0
    last_loss = torch.zeros((), device=rank.device)

    def step() -> None:
        nonlocal step_index, last_loss
        slot = step_index % POOL
        step_index += 1
        # uint8 -> float, minus mean, over std: the seed loop's ToTensor + Normalize, on the device.
        batch = (images[slot].float() - mean) / std
        with torch.autocast(rank.device.type, dtype=torch.bfloat16):
            loss = criterion(model(batch), labels[slot])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        last_loss = loss.detach()  # kept on the device: reading it here would stall the host every step

    measurement = measure(
        step, warmup=workload.warmup, steps=workload.steps, batch_per_rank=workload.batch_per_rank, rank=rank
    )
    variant = "ceiling (bf16, channels_last, fused SGD" + (", compile)" if compile_model else ")")
    report(variant, measurement, rank, last_loss.item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(parser)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = parser.parse_args()
    workload = workload_from_args(args)
    with joined(workload.device) as rank:
        train(workload, rank, args.compile)


if __name__ == "__main__":
    main()

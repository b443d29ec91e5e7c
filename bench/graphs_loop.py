"""The hand-written eager baseline of bench.graphs: small, launch-bound models trained by torch alone.

Each workload is the model bench.graphs asks the trainer for, written here without trainers/: batches made on
the device once and cycled, bf16 autocast, channels_last for convolutions, cuDNN autotuning, fused
optimizers, and no host sync in the step (the loss is read after the clock stops). Under torchrun with
several ranks the model is wrapped in DistributedDataParallel. This is the loop people write by hand today;
on these models Python's kernel launches bound it, which is what CUDA graphs remove.
Prints bench.result's line (images_per_s: samples per second).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torchvision import models

from bench.gpt_loop import GPT, nanogpt_adamw
from bench.runtime import Rank, data_parallel, joined
from bench.timing import measure, report

NUM_CLASSES = 10
POOL = 4  # distinct batches cycled through

# workload -> (image size or context, batch)
SHAPES = {"resnet18": (32, 128), "small_cnn": (32, 128), "mlp": (32, 256), "gpt": (128, 32)}
SMOKE_SHAPES = {"resnet18": (32, 4), "small_cnn": (32, 4), "mlp": (32, 4), "gpt": (16, 2)}
MLP_HIDDEN, MLP_DEPTH = 1024, 3
CNN_CHANNELS = 32
GPT_SHAPE = {"n_layer": 4, "n_head": 4, "n_embd": 256, "vocab_size": 1024}


@dataclass
class Cycle:
    """Which of the pooled batches comes next, and the last step's loss (read after the clock stops)."""

    i: int = 0
    loss: torch.Tensor | None = None

    def next_slot(self) -> int:
        slot = self.i % POOL
        self.i = slot + 1
        return slot

    def last_loss(self) -> float:
        return float("nan") if self.loss is None else float(self.loss.item())


def small_cnn() -> nn.Module:
    def block(c_in: int, c_out: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()
        )

    c = CNN_CHANNELS
    return nn.Sequential(
        block(3, c),
        nn.MaxPool2d(2),
        block(c, 2 * c),
        nn.MaxPool2d(2),
        block(2 * c, 4 * c),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * c, NUM_CLASSES),
    )


def mlp(size: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width = 3 * size * size
    for _ in range(MLP_DEPTH):
        layers += [nn.Linear(width, MLP_HIDDEN), nn.ReLU()]
        width = MLP_HIDDEN
    return nn.Sequential(*layers, nn.Linear(width, NUM_CLASSES))


def image_step(
    workload: str, size: int, batch: int, rank: Rank
) -> tuple[Callable[[], None], Callable[[], float]]:
    model: nn.Module = {
        "resnet18": lambda: models.resnet18(weights=None, num_classes=NUM_CLASSES),
        "small_cnn": small_cnn,
        "mlp": lambda: mlp(size),
    }[workload]().to(rank.device)
    convolutional = workload != "mlp"
    if convolutional:
        model = model.to(memory_format=torch.channels_last)
    model = data_parallel(model, rank, gradient_as_bucket_view=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=rank.device.type == "cuda")
    layout = torch.channels_last if convolutional else torch.contiguous_format
    images = [
        torch.randn(batch, 3, size, size, device=rank.device).contiguous(memory_format=layout)
        for _ in range(POOL)
    ]
    labels = [torch.randint(0, NUM_CLASSES, (batch,), device=rank.device) for _ in range(POOL)]
    cycle = Cycle()

    def step() -> None:
        slot = cycle.next_slot()
        with torch.autocast(rank.device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images[slot]), labels[slot])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        cycle.loss = loss.detach()

    return step, cycle.last_loss


def gpt_step(block: int, batch: int, rank: Rank) -> tuple[Callable[[], None], Callable[[], float]]:
    s = GPT_SHAPE
    gpt = GPT(s["vocab_size"], s["n_layer"], s["n_head"], s["n_embd"], block).to(rank.device)
    model = data_parallel(gpt, rank, gradient_as_bucket_view=True)
    params = list(model.parameters())
    optimizer = nanogpt_adamw(params, rank.device)
    ids = [torch.randint(0, s["vocab_size"], (batch, block + 1), device=rank.device) for _ in range(POOL)]
    cycle = Cycle()

    def step() -> None:
        slot = cycle.next_slot()
        with torch.autocast(rank.device.type, dtype=torch.bfloat16):
            logits = model(ids[slot][:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), ids[slot][:, 1:].flatten())
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        cycle.loss = loss.detach()

    return step, cycle.last_loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(SHAPES), required=True)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--smoke", action="store_true", help="tiny batches on the CPU")
    args = parser.parse_args()
    size, batch = (SMOKE_SHAPES if args.smoke else SHAPES)[args.workload]
    with joined("cpu" if args.smoke else "cuda") as rank:
        torch.manual_seed(0)
        torch.backends.cudnn.benchmark = True
        if args.workload == "gpt":
            step, last_loss = gpt_step(size, batch, rank)
        else:
            step, last_loss = image_step(args.workload, size, batch, rank)
        measurement = measure(step, warmup=args.warmup, steps=args.steps, batch_per_rank=batch, rank=rank)
        report(f"hand-written eager loop ({args.workload})", measurement, rank, last_loss())


if __name__ == "__main__":
    main()

"""A plain PyTorch training script that reports to Trainyard: run it as a program job.

    trainyard code push examples/program_ddp      # prints sha256:...
    trainyard submit examples/program_ddp/spec.json --code examples/program_ddp

The spec's strategy (ddp here) wraps the model, its precision runs the forward, its checkpoint rule saves,
and a cancel stops every rank at one step after a final checkpoint.
"""

from __future__ import annotations

import argparse

import torch
import trainyard.job as ty
from torch import nn
from torch.utils.data import TensorDataset


def dataset(samples: int, features: int, seed: int) -> TensorDataset:
    """A linear problem with noise, the same on every rank (the seed), so the loss can fall."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    w = torch.randn(features, 1, generator=generator)
    return TensorDataset(x, x @ w + 0.01 * torch.randn(samples, 1, generator=generator))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args()
    ctx = ty.init()
    lr = float(ctx.hyperparameters.get("lr", 0.05))
    model = nn.Sequential(nn.Linear(8, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1))
    model, opt = ty.prepare(model, torch.optim.SGD(model.parameters(), lr=lr))
    loader = ty.data_loader(dataset(1024, 8, seed=0), batch_size=16)
    start = ty.restore(model=model, optimizer=opt)
    for step, (x, y) in ty.steps(loader, start):
        with ty.autocast():
            loss = nn.functional.mse_loss(model(x), y)
        ty.backward(loss, opt)
        ty.report(step, loss=loss)
        if ty.checkpoint_due(step):
            ty.save(step, model=model, optimizer=opt)
    if ctx.is_main:
        print(f"done after step {step}")


if __name__ == "__main__":
    main()

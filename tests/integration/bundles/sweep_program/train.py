"""A sweep's program trial: fits a linear problem with the learning rate the sweep sets
(program.hyperparameters.lr), reports its held-out loss every `--every` steps with ty.report_eval, and asks
ty.should_stop() right after, stopping after a final checkpoint when the sweep's pruner gave up on it. Each
step sleeps `--delay` seconds, so a trial lasts long enough to be pruned on any box."""

from __future__ import annotations

import argparse
import time

import torch
import trainyard.job as ty
from torch import nn
from torch.utils.data import TensorDataset


def problem(samples: int, seed: int) -> tuple[TensorDataset, TensorDataset]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 8, generator=generator)
    y = x @ torch.randn(8, 1, generator=generator)
    return TensorDataset(x[64:], y[64:]), TensorDataset(x[:64], y[:64])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    ctx = ty.init()
    model = nn.Linear(8, 1)
    model, opt = ty.prepare(model, torch.optim.SGD(model.parameters(), lr=float(ctx.hyperparameters["lr"])))
    train, held_out = problem(576, seed=0)
    loader = ty.data_loader(train, batch_size=16)
    for step, (x, y) in ty.steps(loader, ty.restore(model=model, optimizer=opt)):
        time.sleep(args.delay)
        loss = nn.functional.mse_loss(model(x), y)
        ty.backward(loss, opt)
        ty.report(step, loss=loss)
        if step % args.every == 0:
            with torch.no_grad():
                ty.report_eval(
                    step, loss=nn.functional.mse_loss(model(held_out.tensors[0]), held_out.tensors[1]).item()
                )
            if ty.should_stop():
                ty.save(step, model=model, optimizer=opt)
                print(f"should_stop at step {step}", flush=True)
                return


if __name__ == "__main__":
    main()

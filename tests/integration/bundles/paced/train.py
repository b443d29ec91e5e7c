"""examples/program_ddp's script, its steps taking a set time (--delay): a test can cancel it mid-run."""

from __future__ import annotations

import argparse
import time

import torch
import trainyard.job as ty
from data import build
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    ty.init()
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    model, opt = ty.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05))
    loader = ty.data_loader(build()[0], batch_size=16)
    start = ty.restore(model=model, optimizer=opt)
    for step, (x, y) in ty.steps(loader, start):
        time.sleep(args.delay)
        with ty.autocast():
            loss = nn.functional.mse_loss(model(x), y)
        ty.backward(loss, opt)
        ty.report(step, loss=loss)
        if ty.checkpoint_due(step):
            ty.save(step, model=model, optimizer=opt)


if __name__ == "__main__":
    main()

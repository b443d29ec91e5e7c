"""A program job that stalls at step 3: rank 1 sleeps before an all_reduce that rank 0 has entered. Steps 1
and 2 report, and step 2 is checkpointed, so that a restart resumes there and stalls again."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import trainyard.job as ty
from torch import nn
from torch.utils.data import TensorDataset

STALL_AT = 3


def wait_forever() -> None:
    time.sleep(3600)


def main() -> None:
    ty.init()
    model = nn.Linear(4, 1)
    model, opt = ty.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05))
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    start = ty.restore(model=model, optimizer=opt)
    print(f"starting after step {start}", flush=True)
    for step, (x, y) in ty.steps(ty.data_loader(data, batch_size=8), start):
        loss = nn.functional.mse_loss(model(x), y)
        ty.backward(loss, opt)
        ty.report(step, loss=loss)
        if ty.checkpoint_due(step):
            ty.save(step, model=model, optimizer=opt)
        if step == STALL_AT:
            if dist.get_rank() == 1:
                wait_forever()
            dist.all_reduce(torch.ones(1, device=x.device))  # on the GPU under NCCL


if __name__ == "__main__":
    main()

"""The library a program job's script imports as `trainyard.job`: the job's strategy, precision, data order,
checkpoints, metrics and stop agreement around the script's own loop.

    import trainyard.job as ty
    ctx = ty.init()
    model, opt = ty.prepare(model, opt)
    loader = ty.data_loader(dataset, batch_size=32)
    start = ty.restore(model=model, optimizer=opt)
    for step, batch in ty.steps(loader, start):
        with ty.autocast():
            loss = model(batch)
        ty.backward(loss, opt)
        ty.report(step, loss=loss)
        if ty.checkpoint_due(step):
            ty.save(step, model=model, optimizer=opt)

One session per process, made by init(); trainers/run.py ends it once the script returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainers.data.batches import Batch
from trainers.job.session import Context, Session, start_session

_session: Session | None = None


def init() -> Context:
    """Join the job's ranks (a second call returns the same context)."""
    global _session
    if _session is None:
        _session = start_session()
    return _session.context()


def current() -> Session | None:
    """The session init() started in this process, if any: what the runner ends after the script."""
    return _session


def _live() -> Session:
    if _session is None:
        raise RuntimeError("call ty.init() first")
    return _session


def prepare(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Any, torch.optim.Optimizer]:
    """The model on its device, wrapped by the spec's strategy (and compiled when performance.compile), and
    the optimizer to step: the same one unless fsdp sharded the parameters it held."""
    return _live().prepare(model, optimizer)


def data_loader(dataset: Dataset[Any], batch_size: int, **options: Any) -> DataLoader[Any]:
    """This rank's share of `dataset` in the job's seeded order, resumable mid-epoch by ty.steps; `options`
    go to DataLoader (collate_fn, num_workers)."""
    return _live().data_loader(dataset, batch_size, **options)


def restore(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Steps already done: the job's latest checkpoint (or checkpoint.resume_from) loaded into the model
    and optimizer ty.prepare returned, or 0 for a fresh start."""
    session = _live()
    if optimizer is not session.optimizer:
        raise ValueError("ty.restore needs the model and optimizer that ty.prepare returned")
    return session.restore()


def steps(loader: DataLoader[Any], start: int = 0) -> Iterator[tuple[int, Batch]]:
    """(step, batch on the rank's device) up to train.max_steps; stops early, after a final checkpoint, when
    the job is cancelled or runs out of time."""
    return _live().steps(loader, start)


def autocast() -> AbstractContextManager[Any]:
    """The spec's precision for the forward pass (nothing under fp32)."""
    return _live().autocast()


def backward(loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> bool:
    """Backward (loss-scaled under fp16); every train.grad_accum_steps calls, clip and step. True when it
    stepped."""
    return _live().backward(loss, optimizer)


def report(step: int, loss: torch.Tensor | float, **metrics: torch.Tensor | float) -> None:
    """Add this step's values on the device; every metrics.every_n_steps they are averaged over ranks and
    rank 0 writes them. No host sync in between."""
    _live().report(step, loss, metrics)


def report_eval(step: int, **metrics: float) -> None:
    """Evaluation values, averaged over ranks (every rank calls it) and stored as eval_<name>."""
    _live().report_eval(step, metrics)


def checkpoint_due(step: int) -> bool:
    """Whether the spec's checkpoint rule saves at `step`."""
    return _live().checkpoint_due(step)


def save(step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """A checkpoint of the prepared model and optimizer, written by rank 0 in the background; every rank
    calls it."""
    session = _live()
    if optimizer is not session.optimizer:
        raise ValueError("ty.save needs the model and optimizer that ty.prepare returned")
    session.save(step)


def should_stop() -> bool:
    """Whether the job was asked to stop (cancel, max_runtime); a collective, for loops without ty.steps."""
    return _live().should_stop()


__all__ = [
    "Context",
    "autocast",
    "backward",
    "checkpoint_due",
    "data_loader",
    "init",
    "prepare",
    "report",
    "report_eval",
    "restore",
    "save",
    "should_stop",
    "steps",
]

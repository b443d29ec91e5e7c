"""Checkpoints rank 0 writes atomically, prunes to keep_last, and every rank loads to resume.

A checkpoint is a plain dict of tensors and numbers, so it loads with weights_only=True: opening one never
runs pickled code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from trainers.events import CHECKPOINT_DIR, CheckpointEvent, CheckpointRemovedEvent
from trainers.metrics import EventLog
from trainers.precision import MixedPrecision
from trainers.strategies.base import ParallelStrategy

_WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel, torch.compile


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.pt"


def bare_keys(model_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """State keys as the bare model names them, whichever wrappers the module still wore."""
    state = {}
    for key, value in model_state.items():
        while key.startswith(_WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        state[key] = value
    return state



def rng_state(device: torch.device) -> dict[str, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return {"cpu": torch.get_rng_state(), "cuda": cuda}


def restore_rng(state: dict[str, torch.Tensor | None], device: torch.device) -> None:
    # map_location moved these to the device too, but the generators take CPU byte tensors.
    cpu, cuda = state["cpu"], state["cuda"]
    if cpu is not None:
        torch.set_rng_state(cpu.cpu())
    if cuda is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda.cpu(), device)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(state: dict[str, Any], path: Path) -> None:
    """A crash leaves either the old file or the new one, never a torn checkpoint under the final name."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def remove_temp_files(directory: Path) -> None:
    """A writer killed mid-write leaves its temp file behind; rank 0 is the only writer, so any is stale."""
    for stale in directory.glob("*.tmp"):
        stale.unlink(missing_ok=True)


def prune(directory: Path, keep_last: int) -> list[Path]:
    """Delete all but the newest keep_last checkpoints (names sort by step); returns what was deleted."""
    stale = sorted(directory.glob("step-*.pt"))[:-keep_last]
    for path in stale:
        path.unlink()
    return stale


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location=device, weights_only=True)
    return state


class Checkpointer:
    """Writes checkpoints with the events that announce and retire them; only rank 0 should call save."""

    def __init__(self, run_dir: Path, keep_last: int, name: str, events: EventLog) -> None:
        self.run_dir = run_dir
        self.directory = run_dir / CHECKPOINT_DIR
        self.keep_last = keep_last
        self.name = name
        self.events = events

    def save(
        self,
        model_state: dict[str, torch.Tensor],
        optimizer_state: dict[str, Any],
        precision: MixedPrecision,
        step: int,
        epoch: int,
    ) -> Path:
        """The states as ParallelStrategy.full_state gives them: unsharded, whatever the strategy."""
        state = {
            "model": bare_keys(model_state),
            "optimizer": optimizer_state,
            "scaler": precision.state_dict(),
            "rng": rng_state(precision.device),
            "step": step,
            "epoch": epoch,
            "name": self.name,
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        remove_temp_files(self.directory)
        path = self.directory / checkpoint_name(step)
        write_atomically(state, path)
        self.events.append(
            CheckpointEvent(step=step, epoch=epoch, path=self._relative(path), size_bytes=path.stat().st_size)
        )
        for removed in prune(self.directory, self.keep_last):
            self.events.append(CheckpointRemovedEvent(path=self._relative(removed)))
        return path

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.run_dir).as_posix()


def restore(
    state: dict[str, Any],
    strategy: ParallelStrategy,
    optimizer: torch.optim.Optimizer,
    precision: MixedPrecision,
) -> int:
    """Load a checkpoint into the strategy's model and optimizer; returns the optimizer steps it had done."""
    strategy.load_full_state(state["model"], state["optimizer"], optimizer)
    precision.load_state_dict(state["scaler"])
    restore_rng(state["rng"], precision.device)
    step: int = state["step"]
    return step

"""Checkpoints rank 0 writes atomically, prunes to keep_last, and every rank loads to resume.

A checkpoint is a plain dict of tensors and numbers, so it loads with weights_only=True: opening one never
runs pickled code. Its sha256, taken once it is written, goes beside it (step-N.pt.sha256, as `sha256sum`
writes it) and into its event, so a resume refuses bytes that changed on disk since.

Training does not wait for the disk: save() takes a snapshot of the state (see trainers/snapshot.py) and a
thread writes it, so the loop stops only for the copy. One write is in flight at a time, and a checkpoint's
event is appended once its file is durable, so the worker never announces a checkpoint that a crash could
still lose.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

from jobspec.events import CHECKPOINT_DIR, CheckpointEvent, CheckpointRemovedEvent
from jobspec.files import corruption, file_sha256
from trainers.metrics import EventLog
from trainers.precision import MixedPrecision
from trainers.snapshot import Snapshot
from trainers.strategies.base import ParallelStrategy
from trainers.user_errors import PlatformError

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


class CorruptCheckpoint(Exception):
    """A checkpoint whose bytes are not the ones its sha256 was taken of."""


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _sync(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())


def write_atomically(state: dict[str, Any], path: Path) -> str:
    return write_file_atomically(path, lambda f: torch.save(state, f))


def write_file_atomically(path: Path, write: Callable[[BinaryIO], None]) -> str:
    """A crash leaves either the old file or the new one, never a torn one under the final name.
    Returns the file's sha256, which its sidecar holds from before the file takes its name: a crash between
    the two renames leaves a sidecar that the older file fails, so that file is skipped, never trusted."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        write(f)
        _sync(f)
    digest = file_sha256(tmp)  # read back from the page cache, on the writer thread
    side = sidecar(path)
    side_tmp = side.with_name(side.name + ".tmp")
    with side_tmp.open("wb") as f:
        f.write(f"{digest}  {path.name}\n".encode())
        _sync(f)
    os.replace(side_tmp, side)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return digest


def remove_temp_files(directory: Path) -> None:
    """A writer killed mid-write leaves its temp file behind; rank 0 is the only writer, so any is stale."""
    for stale in directory.glob("*.tmp"):
        stale.unlink(missing_ok=True)


def prune(directory: Path, keep_last: int, pattern: str = "step-*.pt") -> list[Path]:
    """Delete all but the newest keep_last checkpoints (names sort by step); returns what was deleted."""
    stale = sorted(directory.glob(pattern))[:-keep_last]
    for path in stale:
        path.unlink()
        sidecar(path).unlink(missing_ok=True)
    return stale


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any]:
    """Refuses a file whose bytes differ from the sha256 beside it. One with no sidecar (written before
    checksums, or fetched from the object store, which the worker checked against the job's record) loads
    as it is."""
    if not path.is_file():
        # The worker checked the file before it started the job and showed it to the sandbox: not the code's
        # fault, whichever line of it called ty.restore.
        raise PlatformError(f"the checkpoint to resume from, {path}, is not there for the job's ranks")
    recorded = sidecar(path)
    if recorded.is_file():
        expected = recorded.read_text(encoding="utf-8").partition(" ")[0]
        if (why := corruption(path, expected)) is not None:
            raise CorruptCheckpoint(f"checkpoint {path.name} is corrupt: {why}; resume from another one")
    state: dict[str, Any] = torch.load(path, map_location=device, weights_only=True)
    return state


class Checkpointer:
    """Writes checkpoints in the background with the events that announce and retire them; only rank 0
    should call save. Call wait() before reporting the run done or exiting: it joins the last write and
    raises what a write raised."""

    def __init__(self, run_dir: Path, keep_last: int, name: str, events: EventLog) -> None:
        self.run_dir = run_dir
        self.directory = run_dir / CHECKPOINT_DIR
        self.keep_last = keep_last
        self.name = name
        self.events = events
        self._writer: threading.Thread | None = None
        self._failure: BaseException | None = None

    def save(
        self,
        model_state: dict[str, torch.Tensor],
        optimizer_state: dict[str, Any],
        precision: MixedPrecision,
        step: int,
        epoch: int,
    ) -> Path:
        """The states as ParallelStrategy.full_state gives them: unsharded, whatever the strategy. Returns
        the path the checkpoint is being written to."""
        self.wait()  # the previous snapshot is written and freed before another is taken
        snapshot = Snapshot.take(
            {
                "model": bare_keys(model_state),
                "optimizer": optimizer_state,
                "scaler": precision.state_dict(),
                "rng": rng_state(precision.device),
                "step": step,
                "epoch": epoch,
                "name": self.name,
            }
        )
        path = self.directory / checkpoint_name(step)
        self._writer = threading.Thread(
            target=self._write, args=(snapshot, path, epoch), name="checkpoint-writer", daemon=True
        )
        self._writer.start()
        return path

    def wait(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise RuntimeError("writing a checkpoint failed") from failure

    def _write(self, snapshot: Snapshot, path: Path, epoch: int) -> None:
        try:
            state = snapshot.on_host()
            self.directory.mkdir(parents=True, exist_ok=True)
            remove_temp_files(self.directory)
            checkpoint = CheckpointEvent(
                step=state["step"],
                epoch=epoch,
                path=self._relative(path),
                sha256=write_atomically(state, path),
                size_bytes=path.stat().st_size,
            )
            self.events.append(checkpoint)
            for removed in prune(self.directory, self.keep_last):
                self.events.append(CheckpointRemovedEvent(path=self._relative(removed)))
        except BaseException as failure:  # re-raised on the training thread by wait()
            self._failure = failure

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

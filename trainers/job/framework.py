"""What the framework callbacks (trainers/job/hf.py, lightning.py) share: a job's reporting without its
training. The framework keeps its own loop and parallelism (its process group, its wrappers, its files);
this reads the job's config, writes rank 0's metrics and checkpoint events, and answers the stop agreement.

A framework's checkpoint is a file (Lightning) or a folder (Hugging Face); either is packed into one tar under
checkpoints/, written atomically with its sha256, so the job lists and serves it as any other, and resumes
from it by unpacking it (`resume_path`).
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import BinaryIO

import torch

from jobspec.events import CHECKPOINT_DIR, CheckpointEvent, CheckpointRemovedEvent
from trainers.checkpoint import prune, write_file_atomically
from trainers.dist_env import StopRequest
from trainers.job.session import read_config
from trainers.progress import Position, RunOutput

PACKED = "step-*.tar"
UNPACKED_DIR = "resumed"

# Set once a callback stopped its framework on a SIGTERM: the runner then exits as a stopped rank does.
_stopped = False


def stopped_early() -> bool:
    return _stopped


class FrameworkJob:
    def __init__(self) -> None:
        self.config, self.run_dir = read_config()
        spec = self.config.spec
        self.is_main = int(os.environ.get("RANK", "0")) == 0
        self.total = spec.train.max_steps or 0
        self.stop = StopRequest()
        self.stop.listen()
        self.output = RunOutput(self.run_dir, spec, self.total, self.is_main, self.stop)

    @property
    def every_n_steps(self) -> int:
        return self.config.spec.metrics.every_n_steps

    def report(self, step: int, epoch: int, values: dict[str, float]) -> None:
        """Values the framework already reduced over its ranks; rank 0's are written."""
        self.output.report(Position(step, epoch, False, step == self.total), values)

    def should_stop(self, device: torch.device) -> bool:
        """Whether any rank was asked to stop (cancel, max_runtime): a collective in the framework's group."""
        global _stopped
        _stopped = _stopped or self.stop.agreed(device)
        return _stopped

    def checkpoint(self, step: int, epoch: int, source: Path) -> None:
        """`source` (a file or folder the framework saved) packed as this job's checkpoint at `step`."""
        if not self.is_main:
            return
        directory = self.run_dir / CHECKPOINT_DIR
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"step-{step:08d}.tar"

        def pack(out: BinaryIO) -> None:
            with tarfile.open(fileobj=out, mode="w") as tar:
                tar.add(source, arcname=source.name)

        digest = write_file_atomically(path, pack)
        relative = path.relative_to(self.run_dir).as_posix()
        events = self.output.events
        size = path.stat().st_size
        events.append(CheckpointEvent(step=step, epoch=epoch, path=relative, size_bytes=size, sha256=digest))
        for removed in prune(directory, self.config.spec.checkpoint.keep_last, PACKED):
            events.append(CheckpointRemovedEvent(path=removed.relative_to(self.run_dir).as_posix()))

    def resume_from(self) -> Path | None:
        """The file or folder of the checkpoint the job resumes from, unpacked; None for a fresh start."""
        packed = self.config.plan.resume_path
        if packed is None:
            return None
        into = self.run_dir / UNPACKED_DIR / Path(packed).stem
        with tarfile.open(self.run_dir / packed) as tar:
            names = tar.getnames()
            tar.extractall(into, filter="data")
        return into / names[0].split("/")[0]

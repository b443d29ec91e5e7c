"""limits.max_disk_gb: the run directory's size, measured on a thread of its own.

How long a walk of the run directory takes is the job's choice (it decides how many files it writes), so the
supervisor's loop never walks it: it reads what this thread last measured. The job can overshoot the limit by
what it writes in one interval.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from core.config import Settings
from jobspec.spec import JobSpec

GB = 1024**3
CHECK_EVERY_S = 2.0


@dataclass(frozen=True)
class DiskLimit:
    gb: float
    setting: str  # where the limit comes from, for the message


def disk_limit(spec: JobSpec, settings: Settings) -> DiskLimit | None:
    """The spec's limit, or the worker's when that is lower or the spec sets none."""
    limits = [
        DiskLimit(gb, setting)
        for gb, setting in (
            (spec.limits.max_disk_gb, "limits.max_disk_gb"),
            (settings.job_max_disk_gb, "TRAINYARD_JOB_MAX_DISK_GB"),
        )
        if gb is not None
    ]
    return min(limits, key=lambda limit: limit.gb, default=None)


def disk_bytes(folder: Path) -> int:
    """Bytes the files under `folder` take on disk (allocated blocks: a sparse file counts what it holds),
    never following a link out of it."""
    total, pending = 0, [str(folder)]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:  # removed meanwhile, or unreadable: what is gone takes no space
            continue
        for entry in entries:
            try:
                total += entry.stat(follow_symlinks=False).st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
            except OSError:
                continue
    return total


class DiskWatch:
    """Measures `run_dir` every `every_s` on a daemon thread while in its `with` block (not at all without a
    limit); `exceeded()` says when the last measure was past the limit."""

    def __init__(self, run_dir: Path, limit: DiskLimit | None, every_s: float = CHECK_EVERY_S) -> None:
        self.run_dir = run_dir
        self.limit = limit
        self.every_s = every_s
        self._used: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"disk-{run_dir.name}", daemon=True)

    def __enter__(self) -> DiskWatch:
        if self.limit is not None:
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._used = disk_bytes(self.run_dir)
            self._stop.wait(self.every_s)

    def exceeded(self) -> str | None:
        """The failure's message once the run directory is past the limit, else None."""
        used, limit = self._used, self.limit
        if used is None or limit is None or used <= limit.gb * GB:
            return None
        return (
            f"the run directory takes {used / GB:.3g} GB, past {limit.setting}={limit.gb:g}; raise "
            f"{limit.setting}, keep fewer checkpoints (checkpoint.keep_last) or write less into the run "
            "directory"
        )

"""An attempt as the worker hands it to a job's nodes: the run config (spec, plan with the checkpoint to
resume from, attempt number) and whether it runs sandboxed, one file per Slurm restart count, in the job's
Slurm folder (core/slurm_script.py's SLURM_FOLDER), which no rank can write."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from jobspec.files import JobFileMissing, open_job_file
from jobspec.plan import RunConfig

# A spec and its plan are a few kB; more is not a file the worker wrote.
ATTEMPT_MAX_BYTES = 1 << 20


def node_error_mark(restarts: int) -> str:
    """How a node task's own error (node.py) starts in the batch log, for the worker to quote: the log runs
    on across Slurm's restarts, and only the ended attempt's errors speak of its end."""
    return f"trainyard-node (restart {restarts}): "


class NodeAttempt(BaseModel):
    config: RunConfig
    sandboxed: bool


def attempt_file(folder: Path, restarts: int) -> Path:
    return folder / f"attempt-{restarts}.json"


def write_attempt(folder: Path, restarts: int, attempt: NodeAttempt) -> None:
    """Whole or not at all: a node reading it meanwhile sees no file rather than half of one."""
    folder.mkdir(parents=True, exist_ok=True)
    target = attempt_file(folder, restarts)
    partial = target.with_suffix(".part")
    partial.write_text(attempt.model_dump_json())
    os.replace(partial, target)


def wait_for_attempt(folder: Path, restarts: int, timeout_s: float, poll_s: float = 0.2) -> NodeAttempt:
    """The attempt for Slurm's restart count, once the worker has seen the job start and written it. Read
    through the confined opener, with a bound, though no rank can write the folder: a link or a FIFO in its
    place is refused rather than followed."""
    name = attempt_file(folder, restarts).name
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open_job_file(folder, name, ATTEMPT_MAX_BYTES) as opened:
                return NodeAttempt.model_validate_json(opened.file.read())
        except JobFileMissing:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no attempt from the Trainyard worker at {folder / name} after {timeout_s:.0f} s: is "
                    "the worker running, and is TRAINYARD_RUNS_DIR the same shared folder on the login node "
                    "and here?"
                ) from None
            time.sleep(poll_s)

"""The event stream rank 0 writes to runs/<job>/events.jsonl, one JSON object per line.

The worker tails it into SQL. Shared by both sides; no torch import.
"""

from __future__ import annotations

import json
import time
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, TypeAdapter

from trainers.startup import Mark

EVENTS_FILE = "events.jsonl"
SPEC_FILE = "spec.json"
CHECKPOINT_DIR = "checkpoints"
LOG_DIR = "logs"
TENSORBOARD_DIR = "tensorboard"


def rank_log_name(rank: int) -> str:
    return f"rank{rank}.log"


LAUNCHER_LOG = "launcher.log"


def _inside_run_dir(path: str) -> str:
    """Any rank can write the events file, so a path in it is untrusted: it must name a file under the run
    directory by its text alone. Where links on the way lead is checked where the file is read."""
    parts = PurePosixPath(path).parts
    if not parts or parts[0] == "/" or ".." in parts or "\0" in path:
        raise ValueError(f"{path!r} is not a relative path inside the run directory")
    return path


RunPath = Annotated[str, Field(max_length=1024), AfterValidator(_inside_run_dir)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Event(BaseModel):
    time: float = Field(default_factory=time.time)


class PhaseEvent(_Event):
    """The trainer finished setting up (phase=running) and is about to take its first step."""

    kind: Literal["phase"] = "phase"
    phase: Literal["running"]


class StartupEvent(_Event):
    """When each moment of the attempt's start-up came, in epoch seconds (trainers/startup.py's marks; any
    one may be missing). Rank 0 sends it after its first step, or earlier when its loop has no step of its
    own; a later one adds to what an earlier one said."""

    kind: Literal["startup"] = "startup"
    # Known names and finite times only: the worker stores them in a JSON column, which refuses NaN.
    marks: dict[Mark, Annotated[float, Field(allow_inf_nan=False)]] = Field(max_length=len(Mark))


class MetricsEvent(_Event):
    """Values reduced over all ranks at `step` (optimizer steps done so far)."""

    kind: Literal["metrics"] = "metrics"
    step: int
    total_steps: int
    epoch: int
    values: dict[str, float]


class CheckpointEvent(_Event):
    kind: Literal["checkpoint"] = "checkpoint"
    step: int
    epoch: int
    path: RunPath
    size_bytes: int
    sha256: Sha256 | None = None  # of the file's bytes; None from trainers older than checksums


class CheckpointRemovedEvent(_Event):
    kind: Literal["checkpoint_removed"] = "checkpoint_removed"
    path: RunPath


class DoneEvent(_Event):
    """Training ran to its last step (`step`, the run's total) and its last checkpoint is durable. A run
    that a SIGTERM stopped after a final checkpoint writes none."""

    kind: Literal["done"] = "done"
    step: int


class ProfileEvent(_Event):
    """The profile.steps profiled steps are written: a summary and a Chrome trace, relative to the run dir."""

    kind: Literal["profile"] = "profile"
    first_step: int
    steps: int
    summary: RunPath
    trace: RunPath


class WarningEvent(_Event):
    """Something the user should know that did not stop the run: the loss went non-finite under
    train.on_nonfinite=warn or skip_step, or what performance.cuda_graphs=auto decided. The worker records
    the first of each attempt and reason as a job event."""

    kind: Literal["warning"] = "warning"
    step: int
    reason: Literal["nonfinite_loss", "cuda_graphs"]
    message: str = Field(max_length=2000)


Event = Annotated[
    PhaseEvent
    | StartupEvent
    | MetricsEvent
    | CheckpointEvent
    | CheckpointRemovedEvent
    | DoneEvent
    | ProfileEvent
    | WarningEvent,
    Field(discriminator="kind"),
]
_event_adapter: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(line: str) -> Event:
    return _event_adapter.validate_json(line)


def append_event(path: Path, event: BaseModel) -> None:
    """One write per line, flushed, so a tailer never sees half an event once the newline is there."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(event.model_dump(mode="json")) + "\n")
        f.flush()

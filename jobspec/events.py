"""The event stream rank 0 writes to runs/<job>/events.jsonl, one JSON object per line.

The worker tails it into SQL. Shared by both sides; no torch import.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, TypeAdapter

from jobspec.startup import Mark

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

# Bounds on what the worker takes from the file into SQL, so that no event can fail an insert: a line of
# any kind that breaks one is skipped whole (worker/tail.py) and the job is told, once.
MAX_EVENT_BYTES = 64 << 10  # a line longer than this is not read whole; the largest event is about 30 KiB
# The columns steps, epochs and counts go into (core/models.py) are INTEGER, which is 32 bits on PostgreSQL.
SQL_INT_MAX = 2**31 - 1
Count = Annotated[int, Field(ge=0, le=SQL_INT_MAX)]
# checkpoints.size_bytes must hold a file over 2 GiB: bounded by a BIGINT.
ByteSize = Annotated[int, Field(ge=0, le=2**63 - 1)]
# Epoch seconds the worker turns into datetimes, which end with the year 9999.
EpochSeconds = Annotated[float, Field(ge=0, lt=253_402_300_800, allow_inf_nan=False)]
# metrics.name is VARCHAR(64). ASCII only keeps a name one byte a character in the file and safe to show in
# a terminal, a URL or a page; the punctuation is what frameworks put in names (lr-Adam/pg1, val_loss_epoch).
_METRIC_NAME = re.compile(r"[A-Za-z0-9_.:/@%+=()\[\] -]{1,64}")
MAX_METRICS_PER_EVENT = 256


def _metric_name(name: str) -> str:
    if _METRIC_NAME.fullmatch(name) is None:
        shown = name if len(name) <= 64 else f"{name[:64]}… ({len(name)} characters)"
        allowed = "ASCII letters, digits, space and _.:/@%+=()[]-"
        raise ValueError(f"metric name {shown!r} is not 1 to 64 of: {allowed}; rename it")
    return name


MetricName = Annotated[str, AfterValidator(_metric_name)]


def _no_nul(text: str) -> str:
    # PostgreSQL refuses NUL in text columns, where SQLite stores it.
    if "\0" in text:
        raise ValueError("text with a NUL character cannot be stored")
    return text


class _Event(BaseModel):
    time: EpochSeconds = Field(default_factory=time.time)


class PhaseEvent(_Event):
    """The trainer finished setting up (phase=running) and is about to take its first step."""

    kind: Literal["phase"] = "phase"
    phase: Literal["running"]


class StartupEvent(_Event):
    """When each moment of the attempt's start-up came, in epoch seconds (jobspec/startup.py's marks; any
    one may be missing). Rank 0 sends it after its first step, or earlier when its loop has no step of its
    own; a later one adds to what an earlier one said."""

    kind: Literal["startup"] = "startup"
    # Known names and finite times only: the worker stores them in a JSON column, which refuses NaN.
    marks: dict[Mark, EpochSeconds] = Field(max_length=len(Mark))


class MetricsEvent(_Event):
    """Values reduced over all ranks at `step` (optimizer steps done so far). A value that is not finite (a
    diverged loss, written as NaN or Infinity) is kept as null in the job's latest metrics, with no row."""

    kind: Literal["metrics"] = "metrics"
    step: Count
    total_steps: Count
    epoch: Count
    values: dict[MetricName, float] = Field(max_length=MAX_METRICS_PER_EVENT)


class CheckpointEvent(_Event):
    kind: Literal["checkpoint"] = "checkpoint"
    step: Count
    epoch: Count
    path: RunPath
    size_bytes: ByteSize
    sha256: Sha256 | None = None  # of the file's bytes; None from trainers older than checksums


class CheckpointRemovedEvent(_Event):
    kind: Literal["checkpoint_removed"] = "checkpoint_removed"
    path: RunPath


class DoneEvent(_Event):
    """Training ran to its last step (`step`, the run's total) and its last checkpoint is durable. A run
    that a SIGTERM stopped after a final checkpoint writes none."""

    kind: Literal["done"] = "done"
    step: Count


class ProfileEvent(_Event):
    """The profile.steps profiled steps are written: a summary and a Chrome trace, relative to the run dir."""

    kind: Literal["profile"] = "profile"
    first_step: Count
    steps: Count
    summary: RunPath
    trace: RunPath


class WarningEvent(_Event):
    """Something the user should know that did not stop the run: the loss went non-finite under
    train.on_nonfinite=warn or skip_step, or what performance.cuda_graphs=auto decided. The worker records
    the first of each attempt and reason as a job event."""

    kind: Literal["warning"] = "warning"
    step: Count
    reason: Literal["nonfinite_loss", "cuda_graphs"]
    message: Annotated[str, Field(max_length=2000), AfterValidator(_no_nul)]


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

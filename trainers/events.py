"""The event stream rank 0 writes to runs/<job>/events.jsonl, one JSON object per line.

The worker tails it into SQL. Shared by both sides; no torch import.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter

EVENTS_FILE = "events.jsonl"
SPEC_FILE = "spec.json"
CHECKPOINT_DIR = "checkpoints"
LOG_DIR = "logs"


def rank_log_name(rank: int) -> str:
    return f"rank{rank}.log"


LAUNCHER_LOG = "launcher.log"


class _Event(BaseModel):
    time: float = Field(default_factory=time.time)


class PhaseEvent(_Event):
    """The trainer finished setting up (phase=running) and is about to take its first step."""

    kind: Literal["phase"] = "phase"
    phase: Literal["running"]


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
    path: str  # relative to the run directory
    size_bytes: int


class CheckpointRemovedEvent(_Event):
    kind: Literal["checkpoint_removed"] = "checkpoint_removed"
    path: str


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
    summary: str
    trace: str


Event = Annotated[
    PhaseEvent | MetricsEvent | CheckpointEvent | CheckpointRemovedEvent | DoneEvent | ProfileEvent,
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

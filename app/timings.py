"""A job's start-up as the API shows it: the marks its worker and rank 0 stored (jobspec/startup.py), as
phases. Shared by the job's page in the API and the dashboard, the CLI and the Prometheus histograms."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from pydantic import BaseModel, Field

from jobspec.startup import PHASE_ENDING, Mark

TO_FIRST_STEP = "to_first_step"  # the whole start-up, queued to first step, beside the phases


class StartupPhase(BaseModel):
    phase: str = Field(description="queued, launch, process_start, imports, data, model, setup or first_step")
    seconds: float


class JobTimings(BaseModel):
    """Where the current attempt's time went between the queue and training."""

    attempt: int
    phases: list[StartupPhase] = Field(
        description="in order; a phase whose end was not marked (a program job has no data or model phase) "
        "is counted in the next one"
    )
    to_first_step_s: float | None = Field(description="from entering the queue to the first step")
    first_step_s: float | None = Field(description="the first step itself: compilation and autotuning")


def phases(marks: Mapping[str, float]) -> list[tuple[str, float]]:
    """The time between each two consecutive marks present, named by the phase the later one ends."""
    present = [mark for mark in Mark if mark in marks]
    return [(PHASE_ENDING[end], marks[end] - marks[start]) for start, end in pairwise(present)]


def between(marks: Mapping[str, float], start: Mark, end: Mark) -> float | None:
    return marks[end] - marks[start] if start in marks and end in marks else None


def job_timings(stored: Mapping[str, Any] | None) -> JobTimings | None:
    """jobs.timings as the API shows it; None before any claim."""
    if stored is None:
        return None
    marks = stored["marks"]
    return JobTimings(
        attempt=stored["attempt"],
        phases=[StartupPhase(phase=name, seconds=seconds) for name, seconds in phases(marks)],
        to_first_step_s=between(marks, Mark.QUEUED, Mark.FIRST_STEP),
        first_step_s=between(marks, Mark.FIRST_STEP, Mark.FIRST_STEP_DONE),
    )

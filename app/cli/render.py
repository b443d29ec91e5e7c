"""How the CLI shows things: one console, and the few formats every command shares."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console

from jobspec.startup import PHASE_ENDING, Mark

if TYPE_CHECKING:
    from app.schemas import JobPublic
    from app.timings import JobTimings

# Markup off: job names and worker messages ("GPUs [1]") are shown as written, never read as styles.
console = Console(highlight=False, markup=False)
# Warnings go to stderr, so that what a command prints for scripts (a dry run's plan as JSON) stays parseable.
warnings_console = Console(highlight=False, markup=False, stderr=True)
# Joins the words of a phrase ("ETA 1:02") so that wrap() never breaks a line inside it.
NBSP = "\u00a0"
LABEL_WIDTH = 10  # "start-up: ", the longest label of `status`


def unbroken(phrase: str) -> str:
    """`phrase`, kept on one line by wrap()."""
    return phrase.replace(" ", NBSP)


def phrases(parts: Iterable[str]) -> str:
    """`parts` joined by ", ", each kept on one line by wrap()."""
    return ", ".join(map(unbroken, parts))


def wrap(text: str, label: str | None = None, label_width: int = LABEL_WIDTH) -> None:
    """Prints `text` wrapped at the terminal's width between words (phrases() joined whole): after
    "  label:" padded to `label_width`, each further line indented under the first word, or, without a
    label, flush."""
    first = "" if label is None else f"  {label + ':':<{label_width}}"
    lines = textwrap.wrap(
        text,
        width=console.width,
        initial_indent=first,
        subsequent_indent=" " * len(first),
        break_long_words=False,  # a word wider than the terminal (a bundle id) is never cut
        break_on_hyphens=False,
    )
    for line in lines:
        console.print(line.replace(NBSP, " "), soft_wrap=True)


def number(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}g}"


def size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value, unit = count / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def local_time(value: datetime) -> str:
    """A moment in the terminal's own time zone; the API sends UTC."""
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def between(start: datetime | None, end: datetime | None) -> float | None:
    return (end - start).total_seconds() if start and end else None


def progress_text(job: JobPublic) -> str:
    total = job.progress.total
    return f"{job.progress.step}/{total}" if total else str(job.progress.step or "-")


def devices(job: JobPublic) -> str:
    """'2 GPUs [0, 1]' once GPUs are leased, else what the plan runs on: 'cpu x2'."""
    if job.gpu_ids:
        count = len(job.gpu_ids)
        return f"{count} GPU{'s' * (count != 1)} [{', '.join(map(str, job.gpu_ids))}]"
    return f"{job.plan.get('device', 'cpu')} x{job.plan.get('world_size', 1)}"


def ran_for(job: JobPublic) -> str:
    """From the first step to the end, or to now while it runs."""
    end = job.finished_at or (datetime.now(UTC) if job.running_at else None)
    return duration(between(job.running_at, end))


def waiting_or_message(job: JobPublic) -> str:
    if job.queue_position is not None:
        return f"#{job.queue_position} in queue" + (f": {job.message}" if job.message else "")
    return job.message or ""


def program_text(program: dict[str, Any]) -> str:
    """A program's argv and its hyperparameters: "python train.py --lr 3e-4 (lr 0.0003, warmup 100)"."""
    hyperparameters = ", ".join(f"{name} {value}" for name, value in program["hyperparameters"].items())
    return " ".join(program["entrypoint"]) + (f" ({hyperparameters})" if hyperparameters else "")


def resumed_text(job: JobPublic) -> str:
    checkpoint = job.spec.get("checkpoint", {}).get("resume_from")
    return "" if checkpoint is None else f", from checkpoint {checkpoint}"


def startup_text(timings: JobTimings) -> str:
    """ "queued 0.4 s, launch 0.1 s, ... -> first step 4.2 s (first step 1.1 s)": the phases up to the first
    step, their sum, then the first step's own time, as phrases for wrap()."""
    first_step = PHASE_ENDING[Mark.FIRST_STEP_DONE]
    before = [
        f"{p.phase.replace('_', ' ')} {p.seconds:.1f} s" for p in timings.phases if p.phase != first_step
    ]
    whole = "" if timings.to_first_step_s is None else f" -> first step {timings.to_first_step_s:.1f} s"
    own = "" if timings.first_step_s is None else f" (first step {timings.first_step_s:.1f} s)"
    return (phrases(before) or "-") + unbroken(whole) + unbroken(own)

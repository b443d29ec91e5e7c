"""The moments of an attempt's start-up, from its place in the queue to its first optimizer step.

The worker marks the first three in the job's row (jobs.timings); the rank process keeps the rest on this
per-process clock, and rank 0 sends them in one StartupEvent (jobspec/events.py) after its first step.
The API turns them into phases (app/timings.py). Torch-free: the worker and the API read the names.
"""

from __future__ import annotations

import os
import time
from enum import StrEnum


class Mark(StrEnum):
    """In the order they happen; each ends the phase PHASE_ENDING names."""

    QUEUED = "queued"  # the attempt entered the queue (or restarted in place)
    PLACED = "placed"  # claimed, its GPUs leased
    LAUNCHED = "launched"  # the worker starts torchrun (node 0)
    PROCESS_STARTED = "process_started"  # rank 0's process began
    IMPORTS_DONE = "imports_done"  # torch and the trainer imported
    DATA_READY = "data_ready"
    MODEL_BUILT = "model_built"
    FIRST_STEP = "first_step"  # set-up over: the phase event's time
    FIRST_STEP_DONE = "first_step_done"  # the first optimizer step finished on the device


# The worker's own marks: a rank's event never sets them (the runtime limit reads LAUNCHED).
WORKER_MARKS = frozenset({Mark.QUEUED, Mark.PLACED, Mark.LAUNCHED})

# In a warm standby's /proc environ, and so in its forked ranks': its id, by which the worker finds them
# (worker/executors/local/kill.py); each standby forked by the factory writes its own there
# (trainers/warm/factory.py).
STANDBY_ID_ENV = "TRAINYARD_STANDBY_ID"

# What the time up to each mark covers, from the mark before it.
PHASE_ENDING: dict[Mark, str] = {
    Mark.PLACED: "queued",
    Mark.LAUNCHED: "launch",
    Mark.PROCESS_STARTED: "process_start",  # torchrun, rendezvous, the rank's interpreter
    Mark.IMPORTS_DONE: "imports",
    Mark.DATA_READY: "data",
    Mark.MODEL_BUILT: "model",
    Mark.FIRST_STEP: "setup",  # process group, wrapping, resume
    Mark.FIRST_STEP_DONE: "first_step",  # compilation and cuDNN autotuning land here
}

_marks: dict[Mark, float] = {}


def process_start_time() -> float:
    """When this process began, in epoch seconds: before the interpreter loaded anything, which a clock read
    in main() would miss. Linux gives the start in clock ticks since boot; elsewhere, now."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            # The command name may hold spaces and parentheses; the fields after its last ")" do not.
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return time.time()
    started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    # Its age from the boot clock, which /proc counts in: /proc/stat's btime holds whole seconds only.
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - started_after_boot
    return time.time() - age


def restart() -> None:
    """A new process: forget anything inherited from a parent it was forked from, and mark its start."""
    _marks.clear()
    _marks[Mark.PROCESS_STARTED] = process_start_time()


def mark(name: Mark, at: float | None = None) -> None:
    """The first time only: a mark names the start-up's moment, not a later pass over the same line."""
    _marks.setdefault(name, time.time() if at is None else at)


def marks() -> dict[Mark, float]:
    return dict(_marks)

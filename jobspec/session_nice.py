"""A job's session runs at the job's niceness, not only its processes.

The worker starts a job's processes below its own priority (TRAINYARD_RANK_NICE, through `nice`:
worker/executors/local/warm/priority.py). On a Linux kernel with autogroup scheduling (sched(7); on by
default in most distributions' kernels), niceness orders only the processes of one session: the CPU is first
shared between sessions, each at the niceness of its autogroup. torchrun starts every rank in a session of
its own, and each standby makes one, so a niced rank still took as much CPU as the whole API did: on a busy
box every user's GET waited seconds (bench/soak). So each process that heads one of a job's sessions gives the
session its own niceness as it starts (a rank, the standby factory, each standby). The sessions of commands
we do not write (a cold torchrun, a sandbox's bwrap) keep the default: niced too, a cold torchrun's imports
starved on a saturated box (worker/executors/local/warm/priority.py). Here, beside the job contract: no torch,
nothing of the service.

A job may set its sessions back to 0 (only a value below 0 needs privilege): what holds against that is a
cgroup's CPU weight on the worker's service (docs/security.md).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PROC = Path("/proc")
AUTOGROUP = PROC / "self" / "autogroup"
# An unprivileged process's change is refused (EAGAIN) within 100 ms of any other's on the box: the ranks of a
# job starting together take turns, in a thread, so that none of them waits for it.
RETRY_S = 0.1
TRIES = 100


def _tried(autogroup: Path, nice: int) -> bool:
    """Whether the session's niceness is set, or can never be: a kernel without autogroups has no file, and a
    process gone has none either."""
    try:
        autogroup.write_text(str(nice))
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def _retry(autogroup: Path, nice: int) -> None:
    for _ in range(TRIES):
        time.sleep(RETRY_S)
        if _tried(autogroup, nice):
            return


def give_session_nice(nice: int, pid: int | None = None) -> None:
    """Set the session (the autogroup) of process `pid` (None: this one) to `nice`, when that is above 0."""
    autogroup = PROC / ("self" if pid is None else str(pid)) / "autogroup"
    if nice > 0 and not _tried(autogroup, nice):
        name = "trainyard-session-nice"
        threading.Thread(target=_retry, args=(autogroup, nice), name=name, daemon=True).start()


def give_session_my_nice() -> None:
    """Set this process's session to the process's own niceness, when that is above 0."""
    give_session_nice(os.nice(0))

"""A rank that torchrun forked from the worker's warm standby (worker/executors/local/warm/launcher.py;
torchrun's fork start method) rather than started as an interpreter of its own: the job's ranks are then
children of one agent."""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

# torchrun's agent looks at its ranks every --monitor-interval (0.1 s by default) and reaps a dead one then.
SIBLING_REAP_WAIT_S = 5.0
POLL_S = 0.02


def is_forked() -> bool:
    return multiprocessing.parent_process() is not None


def wait_for_dead_siblings() -> None:
    """Before a failed rank exits: wait until torchrun has reaped every sibling that died before it.

    Under the fork start method torchrun reports one failure, the lowest rank among those it finds dead at
    one look. A rank failing because a peer was killed (the peer's "Connection reset") would otherwise often
    be reported in the killed rank's stead, and the worker could no longer tell a crash from a communication
    error (worker/failure.py).
    """
    import psutil  # only the worker's own environment, which has it, forks ranks

    agent = psutil.Process(os.getppid())
    deadline = time.monotonic() + SIBLING_REAP_WAIT_S
    while time.monotonic() < deadline and any(_unreaped(rank) for rank in agent.children()):
        time.sleep(POLL_S)


def _unreaped(process: psutil.Process) -> bool:
    import psutil

    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

"""Stopping every process of a job: SIGTERM, a grace period, SIGKILL, and a bounded wait until none is left.

torchrun starts each rank in a session of its own, so a process-group kill misses the ranks and their
data-loader workers. What they all share is the job token in their environment, inherited from the launch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import defaultdict

import psutil

from worker.launch import JOB_TOKEN_ENV

log = logging.getLogger(__name__)

KILL_WAIT_S = 5.0  # after SIGKILL: the kernel only needs to tear the processes down
POLL_S = 0.05


def processes_by_token() -> dict[str, list[psutil.Process]]:
    """Every live process of this host that carries a job token, grouped by token."""
    found: dict[str, list[psutil.Process]] = defaultdict(list)
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            token = proc.environ().get(JOB_TOKEN_ENV)
        except (psutil.AccessDenied, psutil.NoSuchProcess):  # another user's, or gone (zombies included)
            continue
        if token:
            found[token].append(proc)
    return found


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    # A zombie has exited; only its parent's wait() can remove it, so it counts as gone.
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive


def _signal(procs: list[psutil.Process], group: int | None, sig: signal.Signals) -> None:
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
    for proc in procs:
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def _wait_gone(token: str, group: int | None, timeout_s: float) -> list[psutil.Process]:
    """Poll until the token's processes are gone or the time is up; returns those still alive."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = _alive(processes_by_token().get(token, []) + _group_leader(group))
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(POLL_S)


def _group_leader(group: int | None) -> list[psutil.Process]:
    if group is None:
        return []
    try:
        return [psutil.Process(group)]
    except psutil.NoSuchProcess:
        return []


def kill_job(token: str, grace_s: float, group: int | None = None) -> list[psutil.Process]:
    """Stop the job's processes (and the process group `group`, torchrun's); returns any that survived.

    Returns within about grace_s + KILL_WAIT_S. Processes started during the kill carry the token too, so
    the SIGKILL pass finds them in a fresh scan.
    """
    procs = processes_by_token().get(token, [])
    if not _alive(procs + _group_leader(group)):
        return []
    log.info("stopping %d process(es) of job %s", len(procs), token)
    _signal(procs, group, signal.SIGTERM)
    alive = _wait_gone(token, group, grace_s)
    if not alive:
        return []
    log.warning("job %s: %d process(es) outlived SIGTERM by %.1fs; SIGKILL", token, len(alive), grace_s)
    deadline = time.monotonic() + KILL_WAIT_S
    while alive and time.monotonic() < deadline:
        _signal(alive, group, signal.SIGKILL)
        alive = _wait_gone(token, group, min(0.5, max(0.0, deadline - time.monotonic())))
    if alive:
        log.error("job %s: processes %s survived SIGKILL", token, [p.pid for p in alive])
    return alive

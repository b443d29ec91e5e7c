"""Stopping every process of a job: SIGTERM, a grace period, SIGKILL, and a bounded wait until none is left.

torchrun starts each rank in a session of its own, so a process-group kill misses the ranks and their
data-loader workers. What they all share is what the launch put in their environment, which they inherit.
A rank forked from the warm standby (worker/executors/local/warm/launcher.py) shows in /proc the environment
the standby was started with, not the job's: there it carries the standby's id, which the launcher wrote into
the run directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from core.launch import JOB_TOKEN_ENV, RUN_DIR_ENV, job_token
from jobspec.files import JobFileError, open_job_file
from jobspec.startup import STANDBY_ID_ENV
from worker.rundir import append_no_follow

log = logging.getLogger(__name__)

KILL_WAIT_S = 5.0  # after SIGKILL: the kernel only needs to tear the processes down
POLL_S = 0.05

# In the run directory, the ids of the standbys that took an attempt on: one file per job token ("/" as "_"),
# as the nodes of a job on a shared disk share its run directory.
STANDBY_FILES = "standby-{}.id"
STANDBY_FILE_MAX_BYTES = 4096  # an id per line: 33 bytes, one line per hand-over of the attempt's node


@dataclass(frozen=True)
class JobMark:
    """How the processes of one attempt of one job are recognised."""

    token: str
    run_dir: Path

    @property
    def standby_file(self) -> Path:
        return self.run_dir / STANDBY_FILES.format(self.token.replace("/", "_"))

    def env(self) -> dict[str, str]:
        return {RUN_DIR_ENV: str(self.run_dir)}

    def standby_ids(self) -> set[str]:
        """The ids of the standbys that took this attempt on (none when it started cold). A sandboxed job
        owns its run directory: a link there could name another job's standby, and a pipe or a huge file
        would stall the kill, so only a plain file is read, and only its start."""
        try:
            opened = open_job_file(self.run_dir, self.standby_file.name, None)
        except JobFileError:  # none, as after a cold start, or refused
            return set()
        with opened:
            return set(opened.file.read(STANDBY_FILE_MAX_BYTES).decode(errors="replace").split())

    def matches(self, environ: Mapping[str, str], standby_ids: set[str] | None = None) -> bool:
        """`standby_ids`: standby_ids() read once per scan of every process."""
        if environ.get(STANDBY_ID_ENV) in (standby_ids or set()):
            return True
        return environ.get(JOB_TOKEN_ENV) == self.token and environ.get(RUN_DIR_ENV) == str(self.run_dir)


def name_standby(mark: JobMark, standby_id: str) -> None:
    """Record that the standby `standby_id` takes this attempt on, before it does: a kill then finds its
    forked ranks, whenever it comes."""
    with os.fdopen(append_no_follow(mark.standby_file), "a", encoding="utf-8") as file:
        file.write(standby_id + "\n")


def mark_for(job_id: int, attempt: int, host: str, runs_dir: Path) -> JobMark:
    return JobMark(job_token(job_id, attempt, host), runs_dir / str(job_id))


def job_processes(mark: JobMark) -> list[psutil.Process]:
    found = []
    standby_ids = mark.standby_ids()
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if mark.matches(proc.environ(), standby_ids):
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess):  # another user's, or gone (zombies included)
            continue
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


def _group_leader(group: int | None) -> list[psutil.Process]:
    if group is None:
        return []
    try:
        return [psutil.Process(group)]
    except psutil.NoSuchProcess:
        return []


def _signal(procs: list[psutil.Process], group: int | None, sig: signal.Signals) -> None:
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.send_signal(sig)


class _Seen:
    """Every process of the job found so far. One found once stays the job's until it has exited: a process
    in its exit path has already released its memory, so its environment reads empty and the mark no longer
    finds it, while the kernel still tears it down (a pid namespace's first process waits there for every
    other one of the namespace, and a rank may still hold its GPU)."""

    def __init__(self, mark: JobMark, group: int | None) -> None:
        self.mark, self.group = mark, group
        self.procs: dict[int, psutil.Process] = {}

    def alive(self) -> list[psutil.Process]:
        """A fresh scan (processes started meanwhile carry the mark too) joined to those found before."""
        for proc in job_processes(self.mark) + _group_leader(self.group):
            self.procs.setdefault(proc.pid, proc)
        alive = _alive(list(self.procs.values()))
        self.procs = {proc.pid: proc for proc in alive}
        return alive

    def wait_gone(self, timeout_s: float) -> list[psutil.Process]:
        """Poll until the job's processes are gone or the time is up; returns those still alive."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = self.alive()
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(POLL_S)


def kill_job(mark: JobMark, grace_s: float, group: int | None = None) -> list[psutil.Process]:
    """Stop the job's processes (and the process group `group`, torchrun's); returns any that survived.

    Returns within about grace_s + KILL_WAIT_S. Processes started during the kill carry the mark too, so
    each pass finds them in a fresh scan. The caller must not have reaped `group`'s leader yet, so that its
    pid cannot have been reused.
    """
    seen = _Seen(mark, group)
    procs = seen.alive()
    if not procs:
        return []
    log.info("stopping %d process(es) of job %s", len(procs), mark.token)
    _signal(procs, group, signal.SIGTERM)
    alive = seen.wait_gone(grace_s)
    if not alive:
        return []
    log.warning("job %s: %d process(es) outlived SIGTERM by %.1fs; SIGKILL", mark.token, len(alive), grace_s)
    deadline = time.monotonic() + KILL_WAIT_S
    while alive and time.monotonic() < deadline:
        _signal(alive, group, signal.SIGKILL)
        alive = seen.wait_gone(min(0.5, max(0.0, deadline - time.monotonic())))
    if alive:
        log.error("job %s: processes %s survived SIGKILL", mark.token, [p.pid for p in alive])
    return alive

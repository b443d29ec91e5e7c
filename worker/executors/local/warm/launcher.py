"""A torchrun started before its job, with torch and the trainer imported, so a job's start waits for neither.

`python -m torch.distributed.run` spends ~3 s importing torch (on an H200 box) before it starts a rank, and
each rank as much again importing torch, torchvision and the trainer. The worker keeps standbys waiting: each
is forked by the standby factory (worker/executors/local/warm/factory_handle.py), a process that imported
torchrun's module and what every rank of a built-in job imports once, at the worker's start, so the next
standby is ready at once after a launch. A standby blocks on its stdin. Launching a job hands it the torchrun
arguments, environment and log file as one JSON line; it takes them on and runs torchrun's own main() with
those arguments, as `python -m torch.distributed.run` would, except that the ranks of `-m trainers.run` are
forked from it (torchrun's fork start method) rather than started as fresh interpreters
(trainers/warm/standby.py; that code lives beside the runtime it imports, so this package never imports
torch). The worker supervises the standby as it supervised a torchrun it had just started (pid-as-group, exit
status and signals), and the next standby is forked at once. With none forked (the factory still imports, or
died), the launch is a plain torchrun process as before: a job never waits for the factory's imports, which
on a loaded box take longer than a cold start. A standby whose worker goes away reads end-of-file and exits.

A forked process's /proc environ is the one its process was started with, not the job's: the factory starts
with the worker's environment through the ranks' allow-list (so no database or object-store secret shows
there either), and each standby writes an id of its own into it, which the launcher writes into the job's run
directory before the hand-over; kill.py finds the standby and its ranks by that id.

A sandboxed job (core/sandbox.py) starts warm too: bwrap cannot add mounts to a sandbox it has started, so the
launcher starts the job's own sandbox with a holder in it (worker/executors/local/warm/held_sandbox.py) and
hands the standby the descriptors of its namespaces; the standby's child joins them, takes the job's uid and
limits, and runs the job's torchrun there (trainers/warm/enter.py), while the standby outside waits for it and
for the sandbox's end. Its stdin is a socket for that: descriptors pass beside the JSON line, the job's log
among them, which the worker opens without following a link the job may have left in its run directory.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.launch import JOB_TOKEN_ENV, RUN_DIR_ENV, Launch
from core.sandbox import Sandbox, confine
from worker.executors.local.kill import JobMark, name_standby
from worker.executors.local.warm.factory_handle import ForkedStandby, JobProcess, StandbyFactory
from worker.executors.local.warm.held_sandbox import HeldSandbox, hold_sandbox, reap
from worker.executors.local.warm.priority import niced
from worker.rundir import append_no_follow

TORCHRUN_MODULE = "torch.distributed.run"


def _torchrun_args(argv: list[str]) -> list[str] | None:
    """What follows `python -m torch.distributed.run` in a launch's argv; None for any other command, which
    starts cold: one that runs torchrun inside a sandbox, or the tests' stand-in trainers."""
    if argv[1:3] == ["-m", TORCHRUN_MODULE]:
        return argv[3:]
    return None


@dataclass(frozen=True)
class _Standby:
    process: ForkedStandby  # its id is in its /proc environ, and so in its forked ranks'
    channel: socket.socket  # the worker's end of its stdin


def _confinement(box: Sandbox) -> dict[str, Any]:
    """What the sandbox's command does inside bwrap, for the standby's child to do
    (trainers/warm/enter.py)."""
    limits = box.limits
    return {
        "cwd": str(box.cwd),
        "uid": box.run_as,
        "processes": limits.processes,
        "open_files": limits.open_files,
        "file_bytes": limits.file_bytes,
    }


class WarmLauncher:
    """Starts torchrun for a job, through the standby when one is ready. Thread-safe: supervising threads
    of one worker launch through the same instance."""

    def __init__(self, python: str, cwd: Path, enabled: bool = True, count: int = 1, nice: int = 0) -> None:
        self.python = python
        self.cwd = cwd
        self.enabled = enabled
        self.count = count  # standbys kept waiting: jobs launched together start warm up to this many
        self.nice = nice  # every process of a job starts this far below the worker's priority (priority.py)
        self._lock = threading.Lock()
        self._factory: StandbyFactory | None = None
        self._ready: list[_Standby] = []
        self._held: list[HeldSandbox] = []  # sandboxes entered by standbys: waited for once they end

    @property
    def standby(self) -> ForkedStandby | None:
        """The torchrun the next job gets, if one is waiting."""
        return self._ready[0].process if self._ready else None

    def prepare(self) -> None:
        """Fork standbys until `count` are waiting (call at worker start; launches call it themselves)."""
        if not self.enabled:
            return
        with self._lock:
            self._held = reap(self._held)
            self._ready = [standby for standby in self._ready if standby.process.poll() is None]
            missing = self.count - len(self._ready)
            if missing <= 0:
                return
            if self._factory is None or not self._factory.alive:
                self._factory = StandbyFactory(self.python, self.cwd, self.nice)
            self._ready += [_Standby(*self._factory.fork()) for _ in range(missing)]

    def close(self) -> None:
        """Let the waiting standbys and the factory go (when no job runs through them: see
        StandbyFactory.close)."""
        with self._lock:
            for standby in self._ready:
                standby.channel.close()  # it reads end-of-file and exits
            self._ready = []
            if self._factory is not None:
                self._factory.close()

    def start(self, command: Launch, log: Path, box: Sandbox | None = None) -> JobProcess:
        """torchrun for `command`, inside `box` when given, its output appended to `log`; the next standby
        starts meanwhile."""
        # The standby imported torch in the worker's interpreter: a job in another environment starts cold.
        args = _torchrun_args(command.argv) if command.argv[0] == self.python else None
        confined = command if box is None else confine(command, box)
        with self._lock:
            standby = self._take_standby() if args is not None else None
        process: JobProcess | None = None
        if standby is not None and args is not None:
            mark = JobMark(command.env[JOB_TOKEN_ENV], Path(command.env[RUN_DIR_ENV]))
            name_standby(mark, standby.process.id)
            process = self._hand_over(standby, {"args": args, "env": confined.env}, log, box, confined)
        if process is None:
            process = self._cold_start(confined, log)
        self.prepare()
        return process

    def _take_standby(self) -> _Standby | None:
        """A waiting standby that is forked or comes in moments; None while the factory still imports (the
        standbys stay for later jobs). Called with the lock held."""
        imported = self._factory is not None and self._factory.imported
        standby = next((s for s in self._ready if imported or s.process.forked(0)), None)
        if standby is not None:
            self._ready.remove(standby)
        return standby

    def _hand_over(
        self, standby: _Standby, request: dict[str, Any], log: Path, box: Sandbox | None, confined: Launch
    ) -> ForkedStandby | None:
        """The standby, given the job (and, for a sandboxed one, its sandbox held open); None when it died,
        will never be forked, or the sandbox did not come up, and the job starts cold."""
        held = None
        with standby.channel:
            # A fork that comes in moments (see _take_standby) the job waits for in its channel: the launch
            # must not wait here, inside the transaction that holds the job's row.
            if standby.process.poll() is not None:
                return None
            if box is not None:
                held = hold_sandbox(box, confined, self.python, self.cwd, self.nice)
                if held is None:
                    standby.process.kill()  # it would wait for a job that never comes
                    standby.process.wait()
                    return None
                with self._lock:
                    self._held.append(held)
                request = {**request, "sandbox": _confinement(box)}
            fds = {"log": append_no_follow(log), **({} if held is None else held.fds)}
            try:
                message = json.dumps({**request, "fds": list(fds)}).encode() + b"\n"
                socket.send_fds(standby.channel, [message], list(fds.values()))
            except OSError:  # it died between the poll and the send
                standby.process.wait()
                return None
            finally:  # the standby holds its own copies now; ours would keep the sandbox up
                for fd in fds.values():
                    os.close(fd)
        return standby.process

    def _cold_start(self, command: Launch, log: Path) -> subprocess.Popen[bytes]:
        with os.fdopen(append_no_follow(log), "ab") as output:
            return subprocess.Popen(
                niced(command.argv, self.nice),
                env=command.env,
                cwd=self.cwd,
                pass_fds=command.pass_fds,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                # Out of the worker's process group: a Ctrl-C at the worker's terminal reaches only the
                # worker, which then stops and requeues its jobs in order.
                start_new_session=True,
            )

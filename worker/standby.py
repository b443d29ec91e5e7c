"""A torchrun started before its job, so a job's start does not wait for torchrun to import torch.

`python -m torch.distributed.run` spends ~3 s importing torch (on an H200 box) before it starts a rank, and
every job paid that on its way to its first step. The worker keeps one standby: `python -m worker.standby`,
started ahead of time, imports torchrun's module and blocks on its stdin. Launching a job hands it the
torchrun arguments, environment and log file as one JSON line; it takes them on and runs torchrun's own
main() with those arguments, as `python -m torch.distributed.run` would. The worker supervises the standby's
process as it supervised a torchrun it had just started (same pid-as-group, exit status and signals), and
starts the next standby at once. With none ready (the first job, or one died), the launch is a plain
torchrun process as before. A standby whose worker goes away reads end-of-file and exits.

Only torchrun's agent is warm: the ranks are fresh processes with the job's environment, as always. The
standby's /proc environ is the worker's, not the job's, so kill.py finds it by its process group.

A sandboxed job (core/sandbox.py) starts cold: a process cannot enter a mount, pid and user namespace built
for a job it was started before, nor drop to the job's uid and limits and still be the worker's standby.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from core.launch import Launch
from trainers.run import append_output_to
from worker.rundir import append_no_follow

TORCHRUN_MODULE = "torch.distributed.run"


def _torchrun_args(argv: list[str]) -> list[str] | None:
    """What follows `python -m torch.distributed.run` in a launch's argv; None for any other command, which
    starts cold: one that runs torchrun inside a sandbox, or the tests' stand-in trainers."""
    if argv[1:3] == ["-m", TORCHRUN_MODULE]:
        return argv[3:]
    return None


class WarmLauncher:
    """Starts torchrun for a job, through the standby when one is ready. Thread-safe: supervising threads
    of one worker launch through the same instance."""

    def __init__(self, python: str, cwd: Path, enabled: bool = True) -> None:
        self.python = python
        self.cwd = cwd
        self.enabled = enabled
        self._lock = threading.Lock()
        self._standby: subprocess.Popen[bytes] | None = None

    @property
    def standby(self) -> subprocess.Popen[bytes] | None:
        """The torchrun waiting for the next job, if one is."""
        return self._standby

    def prepare(self) -> None:
        """Start a standby if none is waiting (call at worker start; launches call it themselves)."""
        if not self.enabled:
            return
        with self._lock:
            if self._standby is None or self._standby.poll() is not None:
                self._standby = subprocess.Popen(
                    [self.python, "-m", "worker.standby"],
                    cwd=self.cwd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # as torchrun's launch: out of the worker's process group
                )

    def start(self, command: Launch, log: Path) -> subprocess.Popen[bytes]:
        """torchrun for `command`, its output appended to `log`; the next standby starts meanwhile."""
        # The standby imported torch in the worker's interpreter: a job in another environment starts cold.
        args = _torchrun_args(command.argv) if command.argv[0] == self.python else None
        with self._lock:
            standby = self._standby if args is not None else None
            if standby is not None:
                self._standby = None
        process = None
        if standby is not None and args is not None:
            process = self._hand_over(standby, {"args": args, "env": command.env, "log": str(log)})
        if process is None:
            process = self._cold_start(command, log)
        self.prepare()
        return process

    @staticmethod
    def _hand_over(
        standby: subprocess.Popen[bytes], request: dict[str, Any]
    ) -> subprocess.Popen[bytes] | None:
        if standby.poll() is not None or standby.stdin is None:
            return None
        try:
            standby.stdin.write(json.dumps(request).encode() + b"\n")
            standby.stdin.close()
        except BrokenPipeError:  # it died between the poll and the write
            standby.wait()
            return None
        return standby

    def _cold_start(self, command: Launch, log: Path) -> subprocess.Popen[bytes]:
        with os.fdopen(append_no_follow(log), "ab") as output:
            return subprocess.Popen(
                command.argv,
                env=command.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                # Out of the worker's process group: a Ctrl-C at the worker's terminal reaches only the
                # worker, which then stops and requeues its jobs in order.
                start_new_session=True,
            )


def _take_on(request: dict[str, Any]) -> None:
    """Become the job's torchrun process: its environment, its log on stdout and stderr, no stdin."""
    os.environ.clear()
    os.environ.update(request["env"])
    append_output_to(Path(request["log"]))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def main() -> None:
    import torch.distributed.run as torchrun  # the seconds this process exists to spend early

    line = sys.stdin.readline()
    if not line:
        return  # the worker went away without needing this standby
    request = json.loads(line)
    _take_on(request)
    torchrun.main(request["args"])


if __name__ == "__main__":
    main()

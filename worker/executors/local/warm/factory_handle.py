"""The worker's side of the standby factory (trainers/warm/factory.py): one process, started once, that has
imported torch and the trainer and forks each warm standby from itself, and the handle by which the worker
supervises a forked standby as it supervises a process it started (pid, poll, wait, kill).

A forked standby is the factory's child, not the worker's: the factory waits for it and sends its exit code.
The worker also holds a pidfd of each, which tells that it has ended even if the factory has died meanwhile;
its code is then unknown, and the job counts as failed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Protocol

from core.launch import inherited
from jobspec.startup import STANDBY_ID_ENV
from worker.executors.local.warm.priority import niced

FACTORY_MODULE = "trainers.warm.factory"
MESSAGE_BYTES = 256
# How long a standby's pid may take to come: the factory forks after its imports, seconds on a loaded host.
FORK_WAIT_S = 60.0
# Between a forked standby's end (its pidfd) and the factory's word of its exit code, while the factory lives
# (a factory found dead gives up at once): 5 s ran out on a box the suite kept busy, and a job that had
# finished was recorded failed with LOST_EXIT_CODE.
EXIT_CODE_WAIT_S = 60.0
LOST_EXIT_CODE = 255  # the factory died before it could say how a standby ended
POLL_S = 0.05


def readable_now(fd: int) -> bool:
    """Whether `fd` is readable now. poll, not select: the worker holds a file per job's log, pipe and
    socket, and select refuses any descriptor past 1023."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class JobProcess(Protocol):
    """What the worker needs of a job's torchrun process: a Popen, or a standby forked by the factory."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class ForkedStandby:
    """A standby the factory forked (or is about to fork): supervised as a Popen is."""

    def __init__(self, standby_id: str) -> None:
        self.id = standby_id
        self.returncode: int | None = None
        self._pid: int | None = None
        self._pidfd: int | None = None
        self._pidfd_lock = threading.Lock()  # poll() selects on it while the reader thread may close it
        self._forked = threading.Event()  # or lost: the factory died before the fork
        self._exited = threading.Event()  # or the factory died, and its word will never come

    def forked(self, timeout: float) -> bool:
        """Whether the factory forked it (waiting up to `timeout` for that); False if it never will."""
        return self._forked.wait(timeout) and self._pid is not None

    @property
    def lost(self) -> bool:
        """The factory died before it forked this standby: no process ever took the job."""
        return self._forked.is_set() and self._pid is None

    @property
    def pid(self) -> int:
        if not self.forked(FORK_WAIT_S):
            raise RuntimeError(f"standby {self.id} was never forked")
        assert self._pid is not None
        return self._pid

    def poll(self) -> int | None:
        ended = self.returncode is None and self._ended()
        if ended and self._pid is not None:
            self._exited.wait(EXIT_CODE_WAIT_S)
        if ended and self.returncode is None:  # lost before its fork, or its factory died or never said
            self._set_exit(LOST_EXIT_CODE)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(FACTORY_MODULE, timeout or 0.0)
            time.sleep(POLL_S)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self) -> bool:
        """Whether it has exited: lost before its fork, or its pidfd readable."""
        if not self._forked.is_set():
            return False
        with self._pidfd_lock:
            return self._pidfd is None or readable_now(self._pidfd)

    def _set_forked(self, pid: int | None) -> None:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):  # already reaped: its exit message follows
                self._pidfd = os.pidfd_open(pid)
        self._pid = pid
        self._forked.set()

    def _factory_gone(self) -> None:
        """The factory died: the exit code it would have sent never comes, and poll() need not wait for it."""
        self._exited.set()

    def _set_exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()
        with self._pidfd_lock:
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None


def never_ran(process: JobProcess) -> bool:
    """A job handed to a standby the factory never forked: it never started, through no fault of its own."""
    return isinstance(process, ForkedStandby) and process.lost


class StandbyFactory:
    """The factory's process and its channel; forks standbys on request. Thread-safe."""

    def __init__(self, python: str, cwd: Path, nice: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                # Niced itself, so each standby it forks and whatever that runs is (priority.py).
                niced([python, "-m", FACTORY_MODULE], nice),
                cwd=cwd,
                # A placeholder id, never handed out, which each forked standby overwrites with its own.
                env={**inherited(os.environ), STANDBY_ID_ENV: secrets.token_hex(16)},
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # out of the worker's process group, as each standby
            )
        self._channel = ours
        self._lock = threading.Lock()
        self._unforked: dict[str, ForkedStandby] = {}
        self._running: dict[int, ForkedStandby] = {}
        self._closed = False
        self._imported = False
        threading.Thread(target=self._read, name="standby-factory", daemon=True).start()

    @property
    def alive(self) -> bool:
        return not self._closed and self.process.poll() is None

    @property
    def imported(self) -> bool:
        """Whether it has its imports, as its first fork tells: a standby asked of it now comes in
        milliseconds, where one asked while it still imports comes after them."""
        return self._imported

    def fork(self) -> tuple[ForkedStandby, socket.socket]:
        """A new standby and the worker's end of its stdin; it comes up once the factory has its imports."""
        standby = ForkedStandby(secrets.token_hex(16))
        ours, theirs = socket.socketpair()
        with self._lock, theirs:
            self._unforked[standby.id] = standby
            try:
                socket.send_fds(self._channel, [f"fork {standby.id}".encode()], [theirs.fileno()])
            except OSError:  # the factory is gone
                self._unforked.pop(standby.id)._set_forked(None)
        return standby, ours

    def close(self) -> None:
        """Stop the factory, at once even while it imports; the standbys it forked live on, each until its
        own channel closes, but the exit code of one that runs a job then is lost (LOST_EXIT_CODE)."""
        with contextlib.suppress(OSError):
            self._channel.shutdown(socket.SHUT_RDWR)
        self.process.kill()
        self.process.wait()

    def _read(self) -> None:
        while message := self._receive():
            verb, *words = message.split()
            with self._lock:
                if verb == "forked":
                    standby_id, pid = words[0], int(words[1])
                    standby = self._unforked.pop(standby_id)
                    self._running[pid] = standby
                    self._imported = True
                    standby._set_forked(pid)
                elif verb == "exited":
                    self._running.pop(int(words[0]))._set_exit(int(words[1]))
        with self._lock:
            self._closed = True
            for standby in self._unforked.values():
                standby._set_forked(None)
            self._unforked.clear()
            for standby in self._running.values():
                standby._factory_gone()
        self._channel.close()

    def _receive(self) -> str:
        try:
            return self._channel.recv(MESSAGE_BYTES).decode()
        except OSError:
            return ""

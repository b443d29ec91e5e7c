"""The standby factory's process (`python -m trainers.warm.factory`): it imports torch and the trainer
once, then forks every warm standby of its worker (worker/executors/local/warm/factory_handle.py) from itself,
so a standby is ready at once instead of after seconds of imports, and a worker's standbys share those pages.

Its stdin is a socket of datagrams from the worker. Each request is `fork <id>` with one descriptor, the
standby's own stdin; the factory forks a child that becomes that standby (trainers/warm/standby.py::serve) and
answers `forked <id> <pid>`. It waits for its children and answers `exited <pid> <code>` (Popen's code: minus
the signal for a kill). It exits when the worker goes away; standbys already forked live on.

kill.py finds a standby's ranks by the standby's id in their /proc environ, which is the environment block
their process was started with: a forked child shows its parent's. The factory is started with a placeholder
id there, and each child writes its own id over the placeholder in its copy of that block before it does
anything else, as proc(5) lets a process find it (env_start, env_end in /proc/self/stat).
"""

from __future__ import annotations

import ctypes
import gc
import os
import select
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from jobspec.session_nice import give_session_my_nice
from jobspec.startup import STANDBY_ID_ENV
from trainers.warm.standby import import_rank_modules, serve

REQUEST_BYTES = 256
# In /proc/<pid>/stat, after the command name's closing parenthesis: the 3rd field is the first, and
# env_start and env_end are the 50th and 51st (proc(5)).
ENV_START_FIELD = 50 - 3


def _environ_block() -> tuple[int, bytes]:
    """The address and contents of this process's environment block, as /proc/<pid>/environ shows it."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    start, end = int(fields[ENV_START_FIELD]), int(fields[ENV_START_FIELD + 1])
    return start, ctypes.string_at(start, end - start)


def _id_at() -> tuple[int, int]:
    """Where the id's value lies in the environment block, and its length."""
    start, block = _environ_block()
    value = os.environ[STANDBY_ID_ENV]
    entry, offset = f"{STANDBY_ID_ENV}={value}".encode(), 0
    for found in block.split(b"\0"):
        if found == entry:
            return start + offset + len(STANDBY_ID_ENV) + 1, len(value)
        offset += len(found) + 1
    raise RuntimeError(f"{STANDBY_ID_ENV} is not in this process's environment block")


@dataclass(frozen=True)
class _Child:
    """What a forked child needs to become its standby."""

    standby_id: str
    channel: int  # its stdin to be
    ready: int  # the pipe on which it tells the factory it has its id and group


def _become(child: _Child, at: tuple[int, int]) -> None:
    """In the forked child: take the standby's id, process group and stdin, then say so."""
    address, length = at
    if len(child.standby_id) != length or not child.standby_id.isalnum():
        raise ValueError(f"a standby id of {length} letters and digits, not {child.standby_id!r}")
    ctypes.memmove(address, child.standby_id.encode(), length)
    os.setsid()  # a process group of its own, which the job's kill signals, as a standby started apart had
    give_session_my_nice()
    os.dup2(child.channel, 0)
    os.close(child.channel)
    os.write(child.ready, b"!")
    os.close(child.ready)


def _fork(control: socket.socket, children: dict[int, int]) -> _Child | None:
    """Serve one request. Returns in the forked child only, with what it needs; raises EOFError when the
    worker has gone away."""
    data, fds, _, _ = socket.recv_fds(control, REQUEST_BYTES, 1)
    if not data:
        raise EOFError
    verb, standby_id = data.decode().split()
    if verb != "fork" or len(fds) != 1:
        raise ValueError(f"not a request this factory serves: {data!r} with {len(fds)} descriptors")
    readable, ready = os.pipe()
    pid = os.fork()
    if pid == 0:
        control.close()  # fd 0, which the standby's channel takes
        for fd in (readable, *children):
            os.close(fd)
        return _Child(standby_id, fds[0], ready)
    for fd in (ready, fds[0]):
        os.close(fd)
    # Answer once the child has its id and group: a kill that comes at once must find it by either.
    os.read(readable, 1)  # or end-of-file, if it failed
    os.close(readable)
    children[os.pidfd_open(pid)] = pid
    control.send(f"forked {standby_id} {pid}".encode())
    return None


def _reap(control: socket.socket, children: dict[int, int], pidfd: int) -> None:
    pid = children.pop(pidfd)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    control.send(f"exited {pid} {os.waitstatus_to_exitcode(status)}".encode())


def _serve(control: socket.socket) -> _Child | None:
    """Fork standbys and wait for them until the worker goes away (None); returns in each forked child."""
    children: dict[int, int] = {}  # pidfd: pid
    while True:
        readable, _, _ = select.select([control.fileno(), *children], [], [])
        for ready in readable:
            if ready in children:
                _reap(control, children, ready)
                continue
            try:
                child = _fork(control, children)
            except EOFError:
                return None
            if child is not None:
                return child


def main() -> None:
    give_session_my_nice()  # the worker started the factory in a session of its own
    at = _id_at()  # before the imports: a factory whose children could not be told apart is of no use
    may_fork = import_rank_modules()
    # What the imports made is never garbage, and every standby and rank forked from here holds it: frozen,
    # it is left out of each one's full collections (a quarter of a second each with torch in) and its pages
    # are not copied by the collector's writes to them.
    gc.collect()  # garbage frozen now would never be collected
    gc.freeze()
    child = _serve(socket.socket(fileno=sys.stdin.fileno()))
    if child is None:
        return
    # The forked child, back at the top of the program: from here on it is a standby as one started alone
    # was, and ends as it did. An error unwinds to the interpreter, which prints it and, at its exit, waits
    # for the ranks it forked, which are still saving a final checkpoint on a cancel's SIGTERM.
    _become(child, at)
    serve(may_fork)


if __name__ == "__main__":
    main()

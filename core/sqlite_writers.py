"""Writers of one SQLite database taking turns through a lock file beside it, across threads and processes.

SQLite lets one writer in at a time, and a writer that finds the lock taken polls for it: its busy handler
sleeps 1, 2, 5, 10, 15, 20, 25 ms and more between tries, however soon the writer ahead lets go. With four
API processes submitting at once, the submissions' write sections spent much of their time asleep while the
lock was free: fewer submissions a second for less CPU each (bench/RESULTS.md). Sections that take a turn here
wait in the kernel instead, which wakes the next one as the last lets go. A writer that takes no turn (a
worker's transition) still meets the others at SQLite's own lock, as before: turns order, they do not guard.
A thread waits for its process's turn as long as SQLite's busy timeout (TRAINYARD_DB_BUSY_TIMEOUT_S) and no
longer: the thread ahead may itself be waiting that long for SQLite's lock, and the caller is then answered
503 as SQLite's own timeout is. (The host's turn, an flock, has no timed wait: one thread per process waits
there, behind at most one section of each other process.)
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from core.config import get_settings

# Per database file: a thread lock, since an flock is held by the open file and every thread of a process
# shares it, and the lock file, opened once.
_turns: dict[str, tuple[threading.Lock, int]] = {}
_turns_lock = threading.Lock()


def _turn_of(path: str) -> tuple[threading.Lock, int]:
    with _turns_lock:
        if path not in _turns:
            descriptor = os.open(f"{path}.writers", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            _turns[path] = (threading.Lock(), descriptor)
        return _turns[path]


def _forget_after_fork() -> None:
    """A forked child shares its parent's open lock files, and so their flocks: it opens its own. Its locks
    are new too: one a parent's thread held at the fork would stay held in the child."""
    global _turns_lock
    _turns_lock = threading.Lock()
    for _, descriptor in _turns.values():
        os.close(descriptor)
    _turns.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


@contextmanager
def writer_turn(connection: Connection) -> Iterator[None]:
    """Hold this process's and then the host's turn to write `connection`'s SQLite database for the block (a
    write section: from its first write to its commit). Nothing on a server database, or one in memory."""
    url = connection.engine.url
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        yield
        return
    in_process, descriptor = _turn_of(os.path.abspath(url.database))
    timeout_s = get_settings().db_busy_timeout_s
    if not in_process.acquire(timeout=timeout_s):
        waited = TimeoutError(f"no turn to write {url.database} within {timeout_s:g} s")
        raise OperationalError("waiting for the writers' turn", None, waited)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        in_process.release()

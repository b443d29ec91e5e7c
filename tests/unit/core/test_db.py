"""core/db.py: units of work that write, and reads, run from the API's event loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
from sqlalchemy.orm import Session

from core import db
from core.config import Settings

Runner = Callable[[Callable[[Session], None]], Coroutine[Any, Any, None]]


def at_once(run: Runner, count: int) -> tuple[int, set[str]]:
    """`count` units of 20 ms each started through `run` at once: the most that ran together, and the names
    of the threads they ran on."""
    running, most, names = 0, 0, set()
    lock = threading.Lock()

    def unit(_session: Session) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            names.add(threading.current_thread().name)
        time.sleep(0.02)
        with lock:
            running -= 1

    async def many() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(count):
                group.start_soon(run, unit)

    anyio.run(many)
    return most, names


def test_sqlite_lets_a_few_units_of_work_run_at_once(settings: Settings) -> None:
    """More would fight over the GIL and SQLite's write lock; the others wait their turn on the event loop."""
    most, _ = at_once(db.run_in_session, 4 * db.SQLITE_UNITS_AT_ONCE)
    assert most == db.SQLITE_UNITS_AT_ONCE


def test_polled_reads_take_turns_on_the_read_threads_alone(settings: Settings) -> None:
    """Not on anyio's pool, which writes waiting for SQLite's lock may fill, and never more at once than
    TRAINYARD_API_READ_THREADS: each thread more that wants the GIL makes every request dearer."""
    most, names = at_once(db.run_read, 4 * settings.api_read_threads)
    assert most == settings.api_read_threads
    assert all(name.startswith("trainyard-read") for name in names), names


def test_a_read_by_key_on_sqlite_runs_on_the_event_loop_itself(settings: Settings) -> None:
    """No hop to a thread and back, which cost more than the read."""

    async def where() -> tuple[int, int]:
        return threading.get_ident(), await db.run_key_read(lambda _session: threading.get_ident())

    loop_thread, read_thread = anyio.run(where)
    assert read_thread == loop_thread

"""core/db.py: units of work that write, run from the API's event loop."""

from __future__ import annotations

import threading
import time

import anyio
from sqlalchemy.orm import Session

from core import db
from core.config import Settings


def test_sqlite_lets_a_few_units_of_work_run_at_once(settings: Settings) -> None:
    """More would fight over the GIL and SQLite's write lock; the others wait their turn on the event loop."""
    running, most = 0, 0
    lock = threading.Lock()

    def unit(_session: Session) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    async def many() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(4 * db.SQLITE_UNITS_AT_ONCE):
                group.start_soon(db.run_in_session, unit)

    anyio.run(many)
    assert most == db.SQLITE_UNITS_AT_ONCE

"""Write sections that take their turn (core/sqlite_writers.py) never overlap, between the threads of one
process and between processes, a process forked after its parent took turns included; a thread waits for
its turn no longer than SQLite's busy timeout."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

from core.config import get_settings
from core.sqlite_writers import writer_turn

TURNS = 30


def take_turns(database: Path, log: Path) -> None:
    """Each turn writes its start and its end to `log`; an overlapping turn would interleave them."""
    engine = create_engine(f"sqlite:///{database}")
    with engine.connect() as connection:
        for _ in range(TURNS):
            with writer_turn(connection):
                with log.open("a") as file:
                    file.write(f"in {os.getpid()} {threading.get_ident()}\n")
                time.sleep(0.001)
                with log.open("a") as file:
                    file.write(f"out {os.getpid()} {threading.get_ident()}\n")
    engine.dispose()


def test_turns_never_overlap_across_threads_and_processes(tmp_path: Path) -> None:
    database, log = tmp_path / "t.db", tmp_path / "turns.log"
    take_turns(database, log)  # the parent holds its lock file open before it forks
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=take_turns, args=(database, log)) for _ in range(3)]
    threads = [threading.Thread(target=take_turns, args=(database, log)) for _ in range(2)]
    for worker in [*processes, *threads]:
        worker.start()
    for worker in [*processes, *threads]:
        worker.join(60)
    assert [process.exitcode for process in processes] == [0, 0, 0]
    lines = log.read_text().splitlines()
    assert len(lines) == 2 * TURNS * 6
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert start.startswith("in ") and end == "out " + start.removeprefix("in "), (start, end)


def test_a_thread_waits_for_its_turn_no_longer_than_sqlite_s_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_DB_BUSY_TIMEOUT_S", "0.2")
    get_settings.cache_clear()
    engine = create_engine(f"sqlite:///{tmp_path / 't.db'}")
    holding, answered = threading.Event(), threading.Event()
    outcome: list[BaseException | None] = []

    def hold() -> None:
        with engine.connect() as connection, writer_turn(connection):
            holding.set()
            answered.wait(60)  # held until the other thread has its answer, however long that takes

    def wait_behind() -> None:
        with engine.connect() as connection:
            try:
                with writer_turn(connection):
                    outcome.append(None)
            except OperationalError as error:
                outcome.append(error)
        answered.set()

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(60)
    waiter = threading.Thread(target=wait_behind)
    waiter.start()
    waiter.join(60)
    holder.join(60)
    get_settings.cache_clear()
    (error,) = outcome
    assert isinstance(error, OperationalError) and "within 0.2 s" in str(error), error

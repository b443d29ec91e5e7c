"""Engine and sessions. SQLite runs in WAL mode so the API reads while the worker writes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from anyio import CapacityLimiter, to_thread
from anyio.lowlevel import RunVar
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from core.config import get_settings

P = ParamSpec("P")
T = TypeVar("T")


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


@lru_cache
def engine_for(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # pysqlite opens a transaction only before the first write, so read-then-CAS code never has to
        # upgrade a read snapshot (which SQLite refuses at once); the timeout waits out other writers.
        # A thread that waits for a pooled connection holds one of the API's thread-pool slots meanwhile,
        # and a request holding a connection may need such a slot to finish (FastAPI validates a sync
        # route's response in the pool): with more requests in flight than connections, both sides waited
        # out the pool's 30 s timeout. SQLite connections are cheap local handles, so the pool never makes
        # anyone wait: it keeps as many as the thread pool runs at once (40) and opens more when asked.
        engine = create_engine(
            url,
            connect_args={"timeout": get_settings().db_busy_timeout_s, "check_same_thread": False},
            pool_size=40,
            max_overflow=-1,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def get_engine() -> Engine:
    return engine_for(get_settings().database_url)


@lru_cache
def sessionmaker_for(url: str) -> sessionmaker[Session]:
    return sessionmaker(engine_for(url), expire_on_commit=False)


def new_session() -> Session:
    return sessionmaker_for(get_settings().database_url)()


@contextmanager
def session_scope() -> Iterator[Session]:
    """A unit of work: commit on success, roll back on error."""
    session = new_session()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


# Submissions on SQLite: Python (GIL-bound) work around a write that SQLite lets in one at a time, making the
# other writers sleep and retry. Run 32 at once and the unluckiest wait seconds (bench/RESULTS.md); two keep
# a core busy, and the rest wait their turn in order, as coroutines on the event loop rather than as threads.
SQLITE_UNITS_AT_ONCE = 2
_sqlite_units: RunVar[CapacityLimiter] = RunVar("trainyard_sqlite_units")


def _units_limiter() -> CapacityLimiter | None:
    """One limiter per event loop (tests start several); None, the default pool, on a server database."""
    if not get_settings().is_sqlite:
        return None
    try:
        return _sqlite_units.get()
    except LookupError:
        limiter = CapacityLimiter(SQLITE_UNITS_AT_ONCE)
        _sqlite_units.set(limiter)
        return limiter


def _in_session(work: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
    with new_session() as session:
        return work(session, *args, **kwargs)


async def run_in_session(work: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `work(session, ...)`, a unit of work that writes, in a pool thread and a session of its own: the
    request's whole unit of work in one hop, with at most SQLITE_UNITS_AT_ONCE of them at once on SQLite."""
    return await to_thread.run_sync(partial(_in_session, work, *args, **kwargs), limiter=_units_limiter())


# The reads clients poll (a page of jobs, the queue, a job) are short and never wait for a writer (SQLite's
# WAL, PostgreSQL's MVCC). They run on a few threads of their own, not on anyio's pool of 40 that sync routes
# and writes share: the threads that want the GIL at once take turns at it, and every turn costs CPU, so a
# read answered by one of 40 busy threads cost about twice what it costs on one of two (bench/RESULTS.md).
_read_pool: ThreadPoolExecutor | None = None
_read_pool_lock = threading.Lock()


def _readers() -> ThreadPoolExecutor:
    global _read_pool
    with _read_pool_lock:
        if _read_pool is None:
            threads = get_settings().api_read_threads
            _read_pool = ThreadPoolExecutor(threads, thread_name_prefix="trainyard-read")
        return _read_pool


async def run_read(work: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `work(session, ...)`, a read that writes nothing, on the API's read threads, in a session of its
    own: the request's whole read in one thread hop."""
    read = partial(_in_session, work, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_readers(), read)


async def run_key_read(work: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `work(session, ...)`, a read of a few rows by their keys (a job's GET), where it costs least. On
    SQLite that is here, on the event loop: the rows are pages of a local file that no writer holds up (WAL),
    and handing the read to a thread and back cost more than the read (a job's GET took 1.3 ms of the API's
    CPU through a read thread, 0.9 here: bench/RESULTS.md). On a server database, whose answer is a network
    round trip the loop must not wait for, on the read threads."""
    if get_settings().is_sqlite:
        return _in_session(work, *args, **kwargs)
    return await run_read(work, *args, **kwargs)

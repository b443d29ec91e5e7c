"""Engine and sessions. SQLite runs in WAL mode so the API reads while the worker writes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from anyio import CapacityLimiter, to_thread
from anyio.lowlevel import RunVar
from sqlalchemy import Connection, Engine, create_engine, event
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
            connect_args={"timeout": 30, "check_same_thread": False},
            pool_size=40,
            max_overflow=-1,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def get_engine() -> Engine:
    return engine_for(get_settings().database_url)


@lru_cache
def _sessionmaker(url: str) -> sessionmaker[Session]:
    return sessionmaker(engine_for(url), expire_on_commit=False)


def new_session() -> Session:
    return _sessionmaker(get_settings().database_url)()


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


def _in_session(work: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
    with new_session() as session:
        return work(session, *args, **kwargs)


def _in_connection(work: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
    with get_engine().connect() as connection:
        return work(connection, *args, **kwargs)


# Each thread's own connection for Core reads on SQLite, kept between them: a checkout from the pool and its
# reset and check-in cost ~40 us of a ~250 us job lookup. A Connection serves one thread at a time, and on
# SQLite these reads all run on the event loop's thread (see _read), so in the server there is one.
_held = threading.local()


def _held_connection() -> Connection:
    engine = get_engine()
    connection: Connection | None = getattr(_held, "connection", None)
    if connection is None or connection.engine is not engine or connection.invalidated:
        if connection is not None:
            connection.close()
        connection = _held.connection = engine.connect()
    return connection


def _in_held_connection(
    work: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
) -> T:
    connection = _held_connection()
    try:
        return work(connection, *args, **kwargs)
    finally:
        # Ends the transaction SQLAlchemy began; pysqlite begins none for a SELECT, so between reads the
        # connection holds no snapshot and no lock, as one back in the pool would.
        connection.rollback()


async def _read(read: Callable[[], T]) -> T:
    """On SQLite a short read runs right here on the event loop: a WAL reader never waits for writers and an
    indexed lookup is microseconds of C, less than the hop to a pool thread and back (and the GIL hand-offs
    between that thread and the loop under load). A server database answers over the network, so there the
    read goes to a pool thread."""
    if get_settings().is_sqlite:
        return read()
    return await to_thread.run_sync(read)


async def read_in_session(work: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a short read, `work(session, ...)`, from async code, in a session of its own."""
    return await _read(partial(_in_session, work, *args, **kwargs))


async def read_in_connection(
    work: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """Run a short Core read, `work(connection, ...)`, from async code: for the hottest reads, which need no
    ORM, a Session's bookkeeping costs more than the query. On SQLite it runs on the event loop, on the loop
    thread's held connection; on a server database, in a pool thread on a pooled connection."""
    if get_settings().is_sqlite:
        return _in_held_connection(work, *args, **kwargs)
    return await to_thread.run_sync(partial(_in_connection, work, *args, **kwargs))


# Units of work run_in_session lets into pool threads at once on SQLite. They are Python (GIL-bound) around
# writes that SQLite lets in one at a time, making the others sleep and retry: 32 at once (from 32 clients)
# fought over the GIL and the write lock, and the unluckiest waited seconds (POST p99 ~2 s, max 3-6 s).
# Two keep a core busy; the rest queue in order, as coroutines on the event loop rather than as threads.
SQLITE_UNITS_AT_ONCE = 2
_sqlite_units: RunVar[CapacityLimiter] = RunVar("trainyard_sqlite_units")


def _units_limiter() -> CapacityLimiter | None:
    """One limiter per event loop (tests start several); None, FastAPI's own pool, on a server database."""
    if not get_settings().is_sqlite:
        return None
    try:
        return _sqlite_units.get()
    except LookupError:
        limiter = CapacityLimiter(SQLITE_UNITS_AT_ONCE)
        _sqlite_units.set(limiter)
        return limiter


async def run_in_session(work: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `work(session, ...)`, which may block (a write waits for SQLite's lock), in a pool thread and a
    session of its own: one hop for the request's whole unit of work, and its connection is back in the
    pool before the hop ends."""
    return await to_thread.run_sync(partial(_in_session, work, *args, **kwargs), limiter=_units_limiter())

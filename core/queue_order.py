"""The order queued jobs start in: the highest priority first; within a priority, the owner who used the
cluster least lately (fair share, core/usage.py); then the oldest.

One definition for the workers, which claim in this order (worker/executors/local/leases.py), and the API,
which shows it as queue positions (app/services/queue.py, app/services/queue_index.py): the position a user
sees is the order jobs start.

Every change to the queue (a job that enters or leaves it, changes priority while in it, or starts or stops
waiting for its depends_on) is a row of queue_changes, written by triggers on the jobs table whoever makes the
change (API, worker, reaper): the API's index of the queue reads only the rows after the last it applied, so a
position costs the same at any depth. The migrations 0017 and 0023 create the same triggers on a migrated
database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    DDL,
    Column,
    ColumnElement,
    FromClause,
    Integer,
    Table,
    UnaryExpression,
    event,
    func,
    select,
)

from core.models import Base, Job, UserUsage
from core.usage import NO_USE

JOBS = Base.metadata.tables[Job.__tablename__]
USAGE = Base.metadata.tables[UserUsage.__tablename__]
# The changes of the last KEPT_CHANGES versions: an index further behind reads the whole queue again.
KEPT_CHANGES = 1000
QUEUE_CHANGES = Table(
    "queue_changes",
    Base.metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("job_id", Integer, nullable=False),
)

# SQLite runs one writer at a time, so max + 1 numbers the changes in the order they commit.
_SQLITE_LOG = f"""INSERT INTO queue_changes (version, job_id) SELECT coalesce(max(version), 0) + 1, {{row}}.id
    FROM queue_changes;
    DELETE FROM queue_changes WHERE version <= (SELECT max(version) FROM queue_changes) - {KEPT_CHANGES};"""
_SQLITE_TRIGGERS = (
    f"""CREATE TRIGGER queue_change_insert AFTER INSERT ON jobs WHEN NEW.status = 'queued'
    BEGIN {_SQLITE_LOG.format(row="NEW")} END""",
    f"""CREATE TRIGGER queue_change_update AFTER UPDATE OF status, priority, waiting_on ON jobs
    WHEN (OLD.status = 'queued' OR NEW.status = 'queued')
    AND (OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority
    OR OLD.waiting_on IS NOT NEW.waiting_on)
    BEGIN {_SQLITE_LOG.format(row="NEW")} END""",
    f"""CREATE TRIGGER queue_change_delete AFTER DELETE ON jobs WHEN OLD.status = 'queued'
    BEGIN {_SQLITE_LOG.format(row="OLD")} END""",
)
# PostgreSQL commits concurrently: the table lock, held to the commit, lets one queue change commit at a time,
# so that versions still follow commit order and a reader that saw a version has seen every one before it.
_POSTGRES_TRIGGERS = (
    f"""CREATE FUNCTION queue_change() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE changed integer;
    BEGIN
        IF TG_OP = 'DELETE' THEN changed := OLD.id; ELSE changed := NEW.id; END IF;
        LOCK TABLE queue_changes IN EXCLUSIVE MODE;
        INSERT INTO queue_changes (version, job_id)
            SELECT coalesce(max(version), 0) + 1, changed FROM queue_changes;
        DELETE FROM queue_changes WHERE version <= (SELECT max(version) FROM queue_changes) - {KEPT_CHANGES};
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER queue_change_insert AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.status = 'queued') EXECUTE FUNCTION queue_change()""",
    """CREATE TRIGGER queue_change_update AFTER UPDATE OF status, priority, waiting_on ON jobs FOR EACH ROW
    WHEN ((OLD.status = 'queued' OR NEW.status = 'queued')
    AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.priority IS DISTINCT FROM NEW.priority
    OR OLD.waiting_on IS DISTINCT FROM NEW.waiting_on))
    EXECUTE FUNCTION queue_change()""",
    """CREATE TRIGGER queue_change_delete AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.status = 'queued') EXECUTE FUNCTION queue_change()""",
)
# A schema made by create_all (the unit tests) gets the triggers a migrated one has.
for _dialect, _statements in (("sqlite", _SQLITE_TRIGGERS), ("postgresql", _POSTGRES_TRIGGERS)):
    for _statement in _statements:
        event.listen(Base.metadata, "after_create", DDL(_statement).execute_if(dialect=_dialect))


def _owner_share(jobs: FromClause) -> ColumnElement[float]:
    """The share key of the owner of a row of `jobs`; a user with no row has used nothing."""
    key = select(USAGE.c.share_key).where(USAGE.c.owner == jobs.c.owner).correlate(jobs).scalar_subquery()
    return func.coalesce(key, NO_USE)


# The sort keys, most significant first: each one's value for a view of the jobs table, and whether its
# larger values start first.
_KEYS: tuple[tuple[Callable[[FromClause], ColumnElement[Any]], bool], ...] = (
    (lambda jobs: jobs.c.priority, True),
    (_owner_share, False),
    (lambda jobs: jobs.c.id, False),
)

START_ORDER: tuple[UnaryExpression[object], ...] = tuple(
    key(JOBS).desc() if larger_first else key(JOBS).asc() for key, larger_first in _KEYS
)

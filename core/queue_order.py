"""The order queued jobs start in: the highest priority first; within a priority, the owner who used the
cluster least lately (fair share, core/usage.py); then the oldest.

One definition for the workers, which claim in this order (worker/executors/local/leases.py), and the API,
which shows it as queue positions (app/services/queue.py, app/services/queue_index.py): the position a user
sees is the order jobs start.

Every change to the queue (a job that enters or leaves it, changes priority while in it, or starts or stops
waiting for its depends_on) is a row of queue_changes, written by triggers on the jobs table whoever makes the
change (API, worker, reaper): the API's index of the queue reads only the rows after the last it applied, so a
position costs the same at any depth. The table and its triggers are defined with the jobs table
(core/models.py's QueueChange), so that every schema made by create_all has them; the migrations 0017 and
0023 make the same on a migrated database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, FromClause, UnaryExpression, func, select

from core.models import Base, Job, QueueChange, UserUsage
from core.usage import NO_USE

JOBS = Base.metadata.tables[Job.__tablename__]
USAGE = Base.metadata.tables[UserUsage.__tablename__]
QUEUE_CHANGES = Base.metadata.tables[QueueChange.__tablename__]


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

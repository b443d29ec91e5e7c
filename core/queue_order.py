"""The order queued jobs start in: the highest priority first; within a priority, the owner who used the
cluster least lately (fair share, core/usage.py); then the oldest.

One definition for the workers, which claim in this order (worker/leases.py), and the API, which shows it
as queue positions (app/services/queue.py): the position a user sees is the order jobs start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, FromClause, UnaryExpression, and_, func, select

from core.models import Base, Job, UserUsage
from core.usage import NO_USE

JOBS = Base.metadata.tables[Job.__tablename__]
USAGE = Base.metadata.tables[UserUsage.__tablename__]


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


def starts_before(ahead: FromClause, job: FromClause) -> list[ColumnElement[bool]]:
    """When a row of `ahead` starts before a row of `job` (two views of the jobs table), as disjoint
    conditions, one per key: equal on the keys before it, and ahead on this one. Disjoint, so that counting
    each apart and adding up counts the jobs ahead; the first is a range of the index ix_jobs_queue."""
    conditions = []
    for position, (key, larger_first) in enumerate(_KEYS):
        ties = [earlier(ahead) == earlier(job) for earlier, _ in _KEYS[:position]]
        first = key(ahead) > key(job) if larger_first else key(ahead) < key(job)
        conditions.append(and_(*ties, first))
    return conditions

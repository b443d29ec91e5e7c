"""The order queued jobs start in: the highest priority first and, within a priority, the oldest.

One definition for the workers, which claim in this order (worker/leases.py), and the API, which shows it
as queue positions (app/services/queue.py): the position a user sees is the order jobs start."""

from __future__ import annotations

from sqlalchemy import ColumnElement, FromClause, UnaryExpression, and_

from core.models import Base, Job

JOBS = Base.metadata.tables[Job.__tablename__]

# The sort keys, most significant first, each with whether its larger values start first.
_KEYS: tuple[tuple[str, bool], ...] = (("priority", True), ("id", False))

START_ORDER: tuple[UnaryExpression[object], ...] = tuple(
    JOBS.c[name].desc() if larger_first else JOBS.c[name].asc() for name, larger_first in _KEYS
)


def starts_before(ahead: FromClause, job: FromClause) -> list[ColumnElement[bool]]:
    """When a row of `ahead` starts before a row of `job` (two views of the jobs table), as disjoint
    conditions, one per key: equal on the keys before it, and ahead on this one. Disjoint, so that counting
    each apart and adding up counts the jobs ahead, each count a range of the index ix_jobs_queue."""
    conditions = []
    for position, (name, larger_first) in enumerate(_KEYS):
        ties = [ahead.c[key] == job.c[key] for key, _ in _KEYS[:position]]
        first = ahead.c[name] > job.c[name] if larger_first else ahead.c[name] < job.c[name]
        conditions.append(and_(*ties, first))
    return conditions

"""One reconciler pass over what state changes marked due (a sweep's `trials_due`, a job's `dependants_due`):
the transition only set the mark in its own write; the work it calls for is done here, outside it, a row at a
time in a transaction of its own, and the mark cleared by that work once done, so a pass that dies leaves the
rest to the next."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import InstrumentedAttribute

from core.db import session_scope

log = logging.getLogger(__name__)


def settle_due(
    ids: InstrumentedAttribute[int],
    due: InstrumentedAttribute[bool],
    settle: Callable[[int], object],
    at_most: int,
    failing: str,
) -> list[int]:
    """`settle` each row marked `due`, at most `at_most` of them oldest first; returns their ids. `failing`
    says what failed for a row, as `failing.format(id)`: one row's trouble does not hold up the others."""
    with session_scope() as session:
        marked = list(session.scalars(select(ids).where(due).order_by(ids).limit(at_most)))
    for row_id in marked:
        try:
            settle(row_id)
        except Exception:
            log.exception("%s; tried again next pass", failing.format(row_id))
    return marked

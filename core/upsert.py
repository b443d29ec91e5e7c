"""Idempotent writes: a row the worker reads from a job's files, re-read from the start after a restart or by
a second supervisor, is stored once and left as its last event said; a GPU's health, judged by each worker
process of a host at once, is one row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core.models import Base

# Chunks keep each statement under SQLite's limit on bound parameters.
INSERT_CHUNK_ROWS = 500


def _insert(session: Session, model: type[Base]) -> postgresql.Insert | sqlite.Insert:
    postgres = session.get_bind().dialect.name == "postgresql"
    return postgresql.insert(model) if postgres else sqlite.insert(model)


def insert_ignoring_duplicates(
    session: Session, model: type[Base], rows: Sequence[dict[str, Any]]
) -> list[Row[Any]]:
    """The rows whose primary key is not stored yet; the primary keys of those that went in."""
    inserted: list[Row[Any]] = []
    for start in range(0, len(rows), INSERT_CHUNK_ROWS):
        insert = _insert(session, model).values(rows[start : start + INSERT_CHUNK_ROWS])
        returning = insert.on_conflict_do_nothing().returning(*inspect(model).primary_key)
        inserted += session.execute(returning).all()
    return inserted


def insert_or_update(session: Session, model: type[Base], row: dict[str, Any], keys: list[str]) -> None:
    """The row, or where one with the same `keys` exists, that one given the row's other values. Read again
    from the start, a file's events end as its last event left them."""
    insert = _insert(session, model).values(row)
    updated = {name: insert.excluded[name] for name in row if name not in keys}
    session.execute(insert.on_conflict_do_update(index_elements=keys, set_=updated))

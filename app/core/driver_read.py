"""A one-row Core read run on the driver's cursor, for the API's hottest lookup (GET /v1/jobs/{id}).

On SQLite, Connection.execute spends ~80 us of a job lookup's ~245 us of CPU on the dev machine around the
~20 us SQLite takes: the compiled-cache lookup, an execution context, parameter processing, a CursorResult and
its Row. A statement read here is still compiled by SQLAlchemy (once per dialect), and every column still goes
through its type's own result processor (JSON, SQLite's datetimes), so the values are those execute() returns;
only the per-call machinery is skipped.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Dialect, Select


@dataclass(frozen=True)
class _Compiled:
    sql: str
    order: list[str] | None  # parameter names in the order a positional paramstyle (SQLite's) takes them
    constants: dict[str, Any]  # the statement's own bound values, such as a status it compares with
    processors: list[Callable[[Any], Any] | None]


class OneRowRead:
    """`statement` returns at most one row (a lookup by key); its free parameters are bindparam()s named at
    each call. Statements whose parameters need conversion on the way in (SQLite's datetimes) or expand at
    execution (IN lists) are refused when first compiled: this reader passes values to the driver as given."""

    def __init__(self, statement: Select[Any]) -> None:
        self.statement = statement
        self.columns = [str(column.key) for column in statement.selected_columns]
        self.row: Any = namedtuple("row", self.columns)  # type: ignore[misc]
        self._by_dialect: WeakKeyDictionary[Dialect, _Compiled] = WeakKeyDictionary()

    def _compile(self, dialect: Dialect) -> _Compiled:
        compiled = self.statement.compile(dialect=dialect)
        binds = compiled.binds.values()
        converted = [b.key for b in binds if b.type.dialect_impl(dialect).bind_processor(dialect) is not None]
        if converted or compiled.post_compile_params:
            raise TypeError(f"OneRowRead cannot pass these parameters as given: {converted or 'IN lists'}")
        return _Compiled(
            sql=compiled.string,
            order=list(compiled.positiontup) if compiled.positiontup is not None else None,
            constants={name: b.effective_value for name, b in compiled.binds.items() if not b.required},
            processors=[
                column.type.dialect_impl(dialect).result_processor(dialect, None)
                for column in self.statement.selected_columns
            ],
        )

    def fetch(self, connection: Connection, **params: Any) -> tuple[Any, ...] | None:
        """The row as the driver returns it, before conversion, or None. Reads in the connection's
        transaction, if it has one; the driver begins none for a SELECT on SQLite, and on a server database
        the pool's reset ends the one it begins."""
        compiled = self._compiled(connection.dialect)
        values = {**compiled.constants, **params}
        bound = [values[name] for name in compiled.order] if compiled.order is not None else values
        cursor = connection.connection.cursor()
        try:
            cursor.execute(compiled.sql, bound)
            found: tuple[Any, ...] | None = cursor.fetchone()
        finally:
            cursor.close()
        return found

    def convert(self, dialect: Dialect, found: tuple[Any, ...]) -> Any:
        """A row fetched through `dialect` with the values execute() would give: a named tuple of the
        selected columns' keys."""
        processors = self._compiled(dialect).processors
        return self.row._make(
            value if process is None else process(value)
            for process, value in zip(processors, found, strict=True)
        )

    def _compiled(self, dialect: Dialect) -> _Compiled:
        compiled = self._by_dialect.get(dialect)
        if compiled is None:
            compiled = self._by_dialect[dialect] = self._compile(dialect)
        return compiled

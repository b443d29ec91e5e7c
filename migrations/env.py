"""Alembic environment: the URL comes from the app's settings, the target schema from core.models."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from core.config import get_settings
from core.db import engine_for
from core.models import Base

config = context.config
# A caller running migrations in-process (tests) may keep its own logging setup.
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _configure(**kwargs: object) -> None:
    # SQLite cannot ALTER most things in place; batch mode rebuilds the table instead.
    context.configure(
        target_metadata=target_metadata,
        render_as_batch=get_settings().is_sqlite,
        compare_type=True,
        **kwargs,
    )


def run_migrations_offline() -> None:
    _configure(url=get_settings().database_url, literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


@contextmanager
def _sqlite_foreign_keys_off(connection: Connection) -> Iterator[None]:
    """A batch rebuild drops the old table, and SQLite first deletes its rows, cascading to every row that
    references them (a job's events, metrics, checkpoints): Alembic's batch mode needs foreign keys off. The
    pragma is ignored inside a transaction, so it is set before the migrations' own; they are checked before
    that commits."""
    if connection.dialect.name != "sqlite":
        yield
        return
    connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    connection.commit()
    try:
        yield
    finally:
        connection.exec_driver_sql("PRAGMA foreign_keys=ON")
        connection.commit()


def _run(connection: Connection) -> None:
    with _sqlite_foreign_keys_off(connection):
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
            if connection.dialect.name == "sqlite" and (
                broken := connection.exec_driver_sql("PRAGMA foreign_key_check").all()
            ):
                raise RuntimeError(f"the migration left rows whose references are gone: {broken[:10]}")


def run_migrations_online() -> None:
    connection: Connection | None = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    # The app's engine, so SQLite gets the same pragmas (WAL) the services rely on.
    with engine_for(get_settings().database_url).connect() as connection:
        _run(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

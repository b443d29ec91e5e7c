"""After every migration, each table whose model promises ids that are never reused has SQLite's
AUTOINCREMENT (0012 rebuilt `checkpoints` without it, and 0018 gives it back), so a deleted newest row's id is
not handed out again. The same tables' PostgreSQL sequences:
tests/integration/test_ids_never_reused_postgres.py."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Connection, MetaData, Table, delete, insert, select, text

from core.config import Settings
from core.db import get_engine
from core.models import Base, utcnow
from tests.unit.conftest import alembic_config

# Those whose ids name things in paths, links, downloads and signed deliveries; a new table that promises it
# is checked too, through its model.
KNOWN = {"jobs", "checkpoints", "sweeps", "webhooks", "webhook_deliveries"}


def promised() -> list[str]:
    """The tables whose models ask SQLite for AUTOINCREMENT (core/models.py)."""
    return [
        table.name
        for table in Base.metadata.sorted_tables
        if table.dialect_options["sqlite"]["autoincrement"]
    ]


def reflected(connection: Connection, name: str) -> Table:
    return Table(name, MetaData(), autoload_with=connection)


def add_checkpoint(connection: Connection, job_id: int, step: int) -> int:
    row = {
        "job_id": job_id,
        "step": step,
        "epoch": 0,
        "path": f"c{step}.pt",
        "size_bytes": 1,
        "created_at": utcnow(),
    }
    checkpoint_id: int = connection.execute(insert(reflected(connection, "checkpoints")), [row]).lastrowid
    return checkpoint_id


def test_every_table_that_promises_never_reused_ids_has_autoincrement_after_all_migrations(
    env: Settings,
) -> None:
    assert set(promised()) >= KNOWN
    command.upgrade(alembic_config(), "head")
    with get_engine().connect() as connection:
        created = dict(
            connection.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
            .tuples()
            .all()
        )
    assert [name for name in promised() if "AUTOINCREMENT" not in created[name]] == []


def test_a_deleted_newest_checkpoint_s_id_is_not_given_again(env: Settings) -> None:
    config = alembic_config()
    command.upgrade(config, "0017")  # checkpoints as 0012 left it
    with get_engine().begin() as connection:
        job = {
            "name": "old",
            "owner": "ada",
            "status": "failed",
            "spec": {},
            "plan": {},
            "created_at": utcnow(),
        }
        job_id = connection.execute(
            insert(reflected(connection, "jobs")),
            [job | {"priority": 0, "attempt": 0, "progress_step": 0, "latest_metrics": {}, "total_gpus": 0}],
        ).lastrowid
        kept = [add_checkpoint(connection, job_id, step) for step in (1, 2, 3)]
    command.upgrade(config, "head")
    with get_engine().begin() as connection:
        checkpoints = reflected(connection, "checkpoints")
        assert connection.scalars(select(checkpoints.c.id).order_by(checkpoints.c.id)).all() == kept
        connection.execute(delete(checkpoints).where(checkpoints.c.id == kept[-1]))
        assert add_checkpoint(connection, job_id, 4) == kept[-1] + 1

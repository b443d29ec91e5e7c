"""Migration 0006 rebuilds jobs and checkpoints on SQLite with AUTOINCREMENT, keeping every row that refers to
them, so the newest deleted id is never handed out again; and it adds each job's parent and retry generation.
"""

from __future__ import annotations

from typing import Any

from alembic import command
from sqlalchemy import Connection, MetaData, Table, delete, func, insert, select, text

from core.config import Settings
from core.db import get_engine
from core.models import utcnow
from tests.unit.conftest import alembic_config

CHILDREN = ("job_events", "metrics", "checkpoints")


def table(connection: Connection, name: str) -> Table:
    return Table(name, MetaData(), autoload_with=connection)


def add_job(connection: Connection, **values: Any) -> int:
    row = {"name": "old", "owner": "ada", "status": "failed", "spec": {}, "plan": {}, "created_at": utcnow()}
    defaults = {"priority": 0, "attempt": 0, "progress_step": 0, "latest_metrics": {}, "total_gpus": 0}
    job_id: int = connection.execute(insert(table(connection, "jobs")), [row | defaults | values]).lastrowid
    return job_id


def counts(connection: Connection) -> dict[str, int]:
    return {
        name: connection.scalar(select(func.count()).select_from(table(connection, name)))
        for name in CHILDREN
    }


def test_upgrade_keeps_every_row_and_never_reuses_an_id_then_downgrade_keeps_them_too(env: Settings) -> None:
    config = alembic_config()
    command.upgrade(config, "0005")
    with get_engine().begin() as connection:
        add_job(connection)
        newest = add_job(connection)
        connection.execute(
            insert(table(connection, "job_events")),
            [{"job_id": newest, "to_status": "failed", "attempt": 1, "at": utcnow()}],
        )
        connection.execute(
            insert(table(connection, "metrics")),
            [{"job_id": newest, "name": "loss", "step": 5, "value": 0.5, "epoch": 0, "at": utcnow()}],
        )
        saved = {
            "job_id": newest,
            "step": 5,
            "epoch": 0,
            "path": "c.pt",
            "size_bytes": 1,
            "created_at": utcnow(),
        }
        checkpoint = connection.execute(insert(table(connection, "checkpoints")), [saved]).lastrowid
        before = counts(connection)
    assert before == {"job_events": 1, "metrics": 1, "checkpoints": 1}

    command.upgrade(config, "0006")
    with get_engine().begin() as connection:
        assert counts(connection) == before, "rebuilding jobs took no row that refers to it"
        created = dict(
            connection.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
            .tuples()
            .all()
        )
        assert "AUTOINCREMENT" in created["jobs"] and "AUTOINCREMENT" in created["checkpoints"]
        sequences = dict(connection.execute(text("SELECT name, seq FROM sqlite_sequence")).tuples().all())
        assert sequences == {"jobs": newest, "checkpoints": checkpoint}
        jobs = table(connection, "jobs")
        assert (
            connection.execute(select(jobs.c.parent_id, jobs.c.retry_generation)).all() == [(None, None)] * 2
        )
        connection.execute(delete(table(connection, "checkpoints")))
        connection.execute(delete(jobs).where(jobs.c.id == newest))
        retried = add_job(connection, parent_id=newest - 1, retry_generation=1)
        assert retried == newest + 1, "the deleted newest id is not given again"
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1, "enforced again after migrating"

    command.downgrade(config, "0005")
    with get_engine().connect() as connection:
        jobs = table(connection, "jobs")
        assert "parent_id" not in jobs.c and "retry_generation" not in jobs.c
        assert connection.execute(select(jobs.c.id).order_by(jobs.c.id)).scalars().all() == [
            newest - 1,
            retried,
        ]

"""After every migration on PostgreSQL, each table whose model promises ids that are never reused takes them
from a sequence, which never hands one out twice; the same on SQLite (AUTOINCREMENT):
tests/unit/core/test_migration_ids_never_reused.py. Only the database and the migrations: no stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text

from core.db import get_engine
from tests.integration.servers import Postgres
from tests.unit.conftest import _clear_caches, alembic_config
from tests.unit.core.test_migration_ids_never_reused import KNOWN, promised

pytestmark = pytest.mark.own_services


@pytest.fixture
def migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_server: Postgres) -> Iterator[None]:
    monkeypatch.setenv("TRAINYARD_DATABASE_URL", postgres_server.new_database())
    monkeypatch.setenv("TRAINYARD_BROKER_URL", f"sqla+sqlite:///{tmp_path}/broker.db")
    _clear_caches()
    command.upgrade(alembic_config(), "head")
    yield
    get_engine().dispose()
    _clear_caches()


def test_every_table_that_promises_never_reused_ids_has_a_sequence(migrated: None) -> None:
    assert set(promised()) >= KNOWN
    with get_engine().connect() as connection:
        sequences = {
            name: connection.scalar(text("SELECT pg_get_serial_sequence(:name, 'id')"), {"name": name})
            for name in promised()
        }
    assert [name for name, sequence in sequences.items() if sequence is None] == []


def test_a_deleted_newest_checkpoint_s_id_is_not_given_again(migrated: None) -> None:
    add = text(
        "INSERT INTO checkpoints (job_id, step, epoch, path, size_bytes, created_at) "
        "VALUES (:job, :step, 0, 'c' || :step, 1, now()) RETURNING id"
    )
    with get_engine().begin() as connection:
        job = connection.scalar(
            text(
                "INSERT INTO jobs (name, owner, status, spec, plan, priority, attempt, progress_step, "
                "latest_metrics, total_gpus, created_at) "
                "VALUES ('old', 'ada', 'failed', '{}', '{}', 0, 0, 0, '{}', 0, now()) RETURNING id"
            )
        )
        newest = [connection.scalar(add, {"job": job, "step": step}) for step in (1, 2)][-1]
        connection.execute(text("DELETE FROM checkpoints WHERE id = :id"), {"id": newest})
        assert connection.scalar(add, {"job": job, "step": 3}) == newest + 1

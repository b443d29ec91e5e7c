"""After every migration on PostgreSQL, each table whose model promises ids that are never reused takes them
from a sequence, which never hands one out twice; the same on SQLite (AUTOINCREMENT):
tests/unit/core/test_migration_ids_never_reused.py. Only the database and the migrations: no stack."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from core.db import get_engine
from tests.unit.core.test_migration_ids_never_reused import KNOWN, promised

pytestmark = pytest.mark.own_services


def test_every_table_that_promises_never_reused_ids_has_a_sequence(postgres_migrated: None) -> None:
    assert set(promised()) >= KNOWN
    with get_engine().connect() as connection:
        sequences = {
            name: connection.scalar(text("SELECT pg_get_serial_sequence(:name, 'id')"), {"name": name})
            for name in promised()
        }
    assert [name for name, sequence in sequences.items() if sequence is None] == []


def test_a_deleted_newest_checkpoint_s_id_is_not_given_again(postgres_migrated: None) -> None:
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

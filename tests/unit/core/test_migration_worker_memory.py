"""Migration 0021 gives workers a memory_mb column, null for the rows already there (a worker whose memory
the API does not know, and forecasts CPU jobs against its own), which the next heartbeat fills in with its
host's; the downgrade takes it away with the rows left."""

from __future__ import annotations

import psutil
import pytest
from alembic import command
from sqlalchemy import insert, select

from core.config import Settings
from core.db import get_engine
from core.models import utcnow
from tests.unit.conftest import alembic_config
from tests.unit.core.worker_rows import as_worker_of_vm, workers
from worker.executors.local.reaper import beat


def test_upgrade_adds_nullable_memory_that_a_heartbeat_fills_in(
    env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_worker_of_vm(monkeypatch)
    config = alembic_config()
    command.upgrade(config, "0020")
    old = {
        "id": "vm:1",
        "host": "vm",
        "address": "127.0.0.1",
        "gpus": [],
        "cpus": 2,
        "heartbeat_at": utcnow(),
    }
    with get_engine().begin() as connection:
        connection.execute(insert(workers()), {**old, "started_at": utcnow()})

    command.upgrade(config, "0021")
    beat()
    table = workers()
    with get_engine().connect() as connection:
        rows = {row.id: row.memory_mb for row in connection.execute(select(table.c.id, table.c.memory_mb))}
    assert rows.pop("vm:1") is None, "a worker from before 0021 reports no memory"
    assert list(rows.values()) == [psutil.virtual_memory().total // 2**20]

    command.downgrade(config, "0020")
    assert "memory_mb" not in workers().c
    with get_engine().connect() as connection:
        assert len(connection.execute(select(workers().c.id)).all()) == 2

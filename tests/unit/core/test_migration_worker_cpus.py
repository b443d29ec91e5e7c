"""Migration 0008 gives workers a cpus column, null for the rows already there (a worker whose cores are
not counted), which the next heartbeat fills in; the downgrade takes it away with the rows left."""

from __future__ import annotations

import os

import pytest
from alembic import command
from sqlalchemy import insert, select

from core.config import Settings
from core.db import get_engine
from core.models import utcnow
from tests.unit.conftest import alembic_config
from tests.unit.core.worker_rows import as_worker_of_vm, workers
from worker.executors.local.reaper import beat


def test_upgrade_adds_nullable_cpus_that_a_heartbeat_fills_in(
    env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_worker_of_vm(monkeypatch)
    config = alembic_config()
    command.upgrade(config, "0007")
    old = {"id": "vm:1", "host": "vm", "address": "127.0.0.1", "gpus": [], "heartbeat_at": utcnow()}
    with get_engine().begin() as connection:
        connection.execute(insert(workers()), {**old, "started_at": utcnow()})

    command.upgrade(config, "head")  # the heartbeat writes every column of today's row
    beat()
    table = workers()
    with get_engine().connect() as connection:
        rows = dict(connection.execute(select(table.c.id, table.c.cpus)).all())
    assert rows.pop("vm:1") is None, "a worker from before 0008 reports no cores"
    assert list(rows.values()) == [len(os.sched_getaffinity(0))]

    command.downgrade(config, "0007")
    assert "cpus" not in workers().c
    with get_engine().connect() as connection:
        assert len(connection.execute(select(workers().c.id)).all()) == 2

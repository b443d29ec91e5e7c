"""What the tests of the workers table's migrations share: the table as the database has it now (whatever
revision it is at), and this test as the worker of host `vm`, whose heartbeat writes a row."""

from __future__ import annotations

import pytest
from sqlalchemy import MetaData, Table

from core.config import get_settings
from core.db import get_engine


def workers() -> Table:
    return Table("workers", MetaData(), autoload_with=get_engine())


def as_worker_of_vm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_HOSTNAME", "vm")
    monkeypatch.setenv("TRAINYARD_GPU_INVENTORY", "")
    get_settings.cache_clear()

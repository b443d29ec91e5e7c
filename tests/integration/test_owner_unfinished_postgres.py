"""On PostgreSQL, migration 0028's triggers keep each owner's unfinished jobs and GPUs equal to a recount
after any mix of changes to jobs, as tests/unit/core/test_owner_unfinished.py checks on SQLite. Only the
database and the migrations: no stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command

from core.db import get_engine
from tests.integration.servers import Postgres
from tests.unit.conftest import _clear_caches, alembic_config
from tests.unit.core.test_owner_unfinished import change_jobs_at_random

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


def test_the_kept_figures_equal_a_recount_after_every_change(migrated: None) -> None:
    change_jobs_at_random(get_engine(), 150)

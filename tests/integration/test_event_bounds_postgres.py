"""A job's untrusted events on PostgreSQL, whose INTEGER is 32 bits and whose text refuses NUL: bad lines are
skipped and the caps hold (docs/reliability.md). Only the database and the tail: no stack, no torchrun. The
same scenarios run on SQLite in tests/unit/worker/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.servers import Postgres
from tests.unit.worker.event_bounds import (
    MAX_NAMES,
    MAX_ROWS,
    caps_names_and_rows,
    skips_bad_lines_and_stores_the_rest,
    stores_a_checkpoint_past_2_gib,
)
from tests.unit.worker_fixtures import WorkerDb, worker_db

pytestmark = pytest.mark.own_services


@pytest.fixture
def postgres_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_server: Postgres
) -> Iterator[WorkerDb]:
    monkeypatch.setenv("TRAINYARD_JOB_MAX_METRIC_NAMES", str(MAX_NAMES))
    monkeypatch.setenv("TRAINYARD_JOB_MAX_METRIC_ROWS", str(MAX_ROWS))
    yield from worker_db(tmp_path, monkeypatch, postgres_server.new_database())


def test_bad_lines_are_skipped_on_postgresql(postgres_db: WorkerDb) -> None:
    skips_bad_lines_and_stores_the_rest(postgres_db)


def test_metric_caps_hold_on_postgresql(postgres_db: WorkerDb) -> None:
    caps_names_and_rows(postgres_db)


def test_a_checkpoint_past_2_gib_is_recorded_on_postgresql(postgres_db: WorkerDb) -> None:
    stores_a_checkpoint_past_2_gib(postgres_db)

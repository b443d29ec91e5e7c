"""16 jobs racing for 4 GPUs on PostgreSQL (docs/reliability.md case 8); the SQLite run is a unit test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.servers import Postgres
from tests.unit.worker_fixtures import WorkerDb, race_sixteen_jobs_for_four_gpus, worker_db


@pytest.fixture
def postgres_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_server: Postgres
) -> Iterator[WorkerDb]:
    yield from worker_db(tmp_path, monkeypatch, postgres_server.new_database())


def test_racing_claims_never_share_a_gpu_on_postgresql(postgres_db: WorkerDb) -> None:
    race_sixteen_jobs_for_four_gpus(postgres_db)

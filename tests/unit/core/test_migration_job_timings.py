"""Migration 0010 gives jobs a timings column, null for the jobs already there (shown as no timings until a
worker claims them), and takes it away again with the jobs left as they were."""

from __future__ import annotations

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import MetaData, Table, select, update

from app.main import create_app
from core.config import Settings
from core.db import get_engine
from tests.unit.conftest import alembic_config, job_body


def jobs() -> Table:
    return Table("jobs", MetaData(), autoload_with=get_engine())


def test_upgrade_adds_nullable_timings_and_downgrade_removes_it(env: Settings) -> None:
    config = alembic_config()
    command.upgrade(config, "0009")
    assert "timings" not in jobs().c
    # To the head: the API writes every column of today's models, and reads timings back.
    command.upgrade(config, "head")
    client = TestClient(create_app())
    job_id = client.post("/v1/jobs", json=job_body()).json()["job"]["id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["timings"] is None
    marks = {"queued": 1.0, "placed": 1.5}
    with get_engine().begin() as connection:
        connection.execute(update(jobs()).values(timings={"attempt": 1, "marks": marks}))
    shown = client.get(f"/v1/jobs/{job_id}").json()["timings"]
    assert shown["phases"] == [{"phase": "queued", "seconds": 0.5}]

    command.downgrade(config, "0009")
    assert "timings" not in jobs().c
    with get_engine().connect() as connection:
        assert connection.execute(select(jobs().c.id)).scalar_one() == job_id

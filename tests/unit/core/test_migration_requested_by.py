"""Migration 0011 gives jobs a requested_by column, null for the jobs already there (shown as null: who asked
was not recorded), and takes it away again with the jobs left as they were."""

from __future__ import annotations

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import MetaData, Table, select

from app.main import create_app
from core.config import Settings
from core.db import get_engine
from core.models import utcnow
from tests.unit.conftest import alembic_config, job_body

# A job as a service before 0011 stored it: its columns without requested_by.
OLD_JOB = {
    "name": "old",
    "owner": "local",
    "status": "failed",
    "spec": job_body(),
    "plan": {},
    "priority": 0,
    "attempt": 0,
    "progress_step": 0,
    "latest_metrics": {},
    "created_at": utcnow(),
}


def jobs() -> Table:
    return Table("jobs", MetaData(), autoload_with=get_engine())


def test_upgrade_adds_nullable_requested_by_and_downgrade_removes_it(env: Settings) -> None:
    config = alembic_config()
    command.upgrade(config, "0010")
    assert "requested_by" not in jobs().c
    with get_engine().begin() as connection:
        connection.execute(jobs().insert().values(OLD_JOB))
    command.upgrade(config, "head")
    client = TestClient(create_app())
    [old] = client.get("/v1/jobs").json()["data"]
    assert old["requested_by"] is None
    job_id = client.post("/v1/jobs", json=job_body()).json()["job"]["id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["requested_by"] == "local"

    command.downgrade(config, "0010")
    assert "requested_by" not in jobs().c
    with get_engine().connect() as connection:
        assert connection.execute(select(jobs().c.id).order_by(jobs().c.id)).scalars().all() == [
            old["id"],
            job_id,
        ]

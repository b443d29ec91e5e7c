"""Migration 0009 adds the user_usage table that fair share orders the queue by, and takes it away again
with the jobs left as they were."""

from __future__ import annotations

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import MetaData, Table, inspect, select

from app.main import create_app
from core.config import Settings
from core.db import get_engine, session_scope
from core.models import utcnow
from tests.unit.conftest import alembic_config, job_body
from worker.executors.local.telemetry import charge


def test_upgrade_adds_user_usage_and_downgrade_removes_it(env: Settings) -> None:
    config = alembic_config()
    command.upgrade(config, "0008")
    assert "user_usage" not in inspect(get_engine()).get_table_names()
    # To the head: the worker charges every column, and the queue and /v1/usage read them.
    command.upgrade(config, "head")
    with session_scope() as session:
        charge(session, "local", 3600.0, 0.0, utcnow(), env)
    client = TestClient(create_app())
    assert client.post("/v1/jobs", json=job_body()).status_code == 201
    assert client.get("/v1/queue").json()["data"][0]["owner"] == "local"
    assert [(u["user"], round(u["gpu_hours"])) for u in client.get("/v1/usage").json()["data"]] == [
        ("local", 1)
    ]
    command.downgrade(config, "0008")
    assert "user_usage" not in inspect(get_engine()).get_table_names()
    jobs = Table("jobs", MetaData(), autoload_with=get_engine())
    with get_engine().connect() as connection:
        assert connection.execute(select(jobs.c.owner)).scalar_one() == "local"

"""Migration 0005 adds the code_bundles table, which the API then fills, and takes it away again with the
jobs left as they were."""

from __future__ import annotations

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import MetaData, Table, inspect, select

from app.main import create_app
from core.config import Settings
from core.db import get_engine
from tests.unit.code_archives import bundle_archive, code_id
from tests.unit.conftest import alembic_config, job_body


def test_upgrade_adds_code_bundles_and_downgrade_removes_it(env: Settings) -> None:
    config = alembic_config()
    command.upgrade(config, "0004")
    assert "code_bundles" not in inspect(get_engine()).get_table_names()
    # To the head: the API writes every column of today's models.
    command.upgrade(config, "head")
    client = TestClient(create_app())
    data = bundle_archive()
    pushed = client.post("/v1/code", content=data, headers={"Content-Type": "application/gzip"})
    assert pushed.status_code == 201, pushed.text
    assert client.post("/v1/jobs", json=job_body(code=code_id(data))).status_code == 201
    bundles = Table("code_bundles", MetaData(), autoload_with=get_engine())
    with get_engine().connect() as connection:
        assert connection.execute(select(bundles.c.id, bundles.c.owner, bundles.c.file_count)).all() == [
            (code_id(data), "local", 3)
        ]
    command.downgrade(config, "0004")
    assert "code_bundles" not in inspect(get_engine()).get_table_names()
    jobs = Table("jobs", MetaData(), autoload_with=get_engine())
    with get_engine().connect() as connection:
        assert connection.execute(select(jobs.c.spec)).scalar_one()["code"] == code_id(data)

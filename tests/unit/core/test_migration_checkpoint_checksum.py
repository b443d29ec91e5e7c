"""Migration 0007 gives checkpoints a sha256 column, null for the rows already there (served and resumed from
unchecked, as before), and takes it away again with the rows and the never-reused ids left as they were."""

from __future__ import annotations

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import MetaData, Table, insert, select, text

from app.main import create_app
from core.config import Settings
from core.db import get_engine
from core.models import utcnow
from tests.unit.conftest import alembic_config, job_body


def checkpoints() -> Table:
    return Table("checkpoints", MetaData(), autoload_with=get_engine())


def test_upgrade_adds_a_nullable_sha256_and_downgrade_removes_it(env: Settings) -> None:
    config = alembic_config()
    # The API writes and reads every column of today's models: it runs at the head only.
    command.upgrade(config, "head")
    client = TestClient(create_app())
    job_id = client.post("/v1/jobs", json=job_body()).json()["job"]["id"]
    command.downgrade(config, "0006")
    file = env.runs_dir / str(job_id) / "checkpoints/step-5.pt"
    file.parent.mkdir(parents=True)
    file.write_bytes(b"weights")
    row = {
        "job_id": job_id,
        "step": 5,
        "epoch": 0,
        "path": str(file),
        "size_bytes": 7,
        "created_at": utcnow(),
    }
    with get_engine().begin() as connection:
        connection.execute(insert(checkpoints()), row)
    assert "sha256" not in checkpoints().c

    command.upgrade(config, "0007")
    migrated = checkpoints()
    with get_engine().connect() as connection:
        assert connection.execute(select(migrated.c.step, migrated.c.sha256)).all() == [(5, None)]
    command.upgrade(config, "head")
    (listed,) = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    assert client.get(listed["download_url"]).content == b"weights", "a row from before checksums is served"

    command.downgrade(config, "0006")
    assert "sha256" not in checkpoints().c
    with get_engine().connect() as connection:
        assert connection.execute(select(checkpoints().c.step)).scalars().all() == [5]
        table_sql = connection.execute(text("SELECT sql FROM sqlite_master WHERE name = 'checkpoints'"))
        assert "AUTOINCREMENT" in table_sql.scalar_one(), "0006's ids that are never reused stay so"

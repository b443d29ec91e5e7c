"""Migration 0014 gives jobs their sweep and trial columns by rebuilding the table on SQLite, which keeps
0006's AUTOINCREMENT and the largest id ever given out: a deleted newest job's id is not handed out again."""

from __future__ import annotations

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.main import create_app
from core.config import Settings
from core.db import get_engine
from tests.unit.conftest import alembic_config, job_body


def test_the_rebuilt_jobs_table_never_gives_a_deleted_newest_job_s_id_again(env: Settings) -> None:
    config = alembic_config()
    command.upgrade(config, "0013")
    with get_engine().begin() as connection:
        # As if jobs up to 41 had been made and all deleted: only sqlite_sequence remembers them.
        connection.execute(text("DELETE FROM sqlite_sequence WHERE name = 'jobs'"))
        connection.execute(text("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', 41)"))
    command.upgrade(config, "head")
    with get_engine().connect() as connection:
        table_sql = connection.execute(text("SELECT sql FROM sqlite_master WHERE name = 'jobs'")).scalar_one()
    assert "AUTOINCREMENT" in table_sql
    job = TestClient(create_app()).post("/v1/jobs", json=job_body()).json()["job"]
    assert job["id"] == 42

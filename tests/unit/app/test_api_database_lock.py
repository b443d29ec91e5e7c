"""A SQLite database locked by another writer past TRAINYARD_DB_BUSY_TIMEOUT_S: a submission is a 503
problem+json with Retry-After that is safe to repeat with its Idempotency-Key, and /healthz says the database
takes no writes meanwhile."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.api.errors import DATABASE_RETRY_AFTER_S
from core.config import Settings
from core.models import Job
from tests.unit.conftest import job_body


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # Requested before `client`, so the engine is built with it.
    monkeypatch.setenv("TRAINYARD_DB_BUSY_TIMEOUT_S", "0.2")


@pytest.fixture
def writer(settings: Settings) -> Iterator[sqlite3.Connection]:
    """Another process's connection to the same file, holding SQLite's write lock until it rolls back."""
    connection = sqlite3.connect(settings.database_url.removeprefix("sqlite:///"), isolation_level=None)
    connection.execute("BEGIN IMMEDIATE")
    yield connection
    connection.close()


def test_a_locked_database_is_a_503_that_is_safe_to_repeat(
    short_busy_timeout: None, client: TestClient, writer: sqlite3.Connection, session: Session
) -> None:
    key = {"Idempotency-Key": "once"}
    refused = client.post("/v1/jobs", json=job_body(), headers=key)
    assert refused.status_code == 503, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] == str(DATABASE_RETRY_AFTER_S)
    assert "Idempotency-Key is safe to repeat" in refused.json()["detail"]
    health = client.get("/healthz")
    assert health.status_code == 503
    assert health.json() == {"status": "unavailable", "database": "unwritable: OperationalError"}
    assert client.get("/v1/jobs").status_code == 200  # reads go on: WAL lets them past the writer

    writer.execute("ROLLBACK")
    first = client.post("/v1/jobs", json=job_body(), headers=key)
    again = client.post("/v1/jobs", json=job_body(), headers=key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["job"]["id"] == again.json()["job"]["id"]
    assert session.scalar(select(func.count()).select_from(Job)) == 1
    assert client.get("/healthz").json() == {"status": "ok", "database": "ok"}

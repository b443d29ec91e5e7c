"""What the hot paths' shortcuts must not change: the documented auth scheme, the quota's answers, how
many submissions work on SQLite at once, and what a lookup on a held connection sees."""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text, update
from sqlalchemy.orm import Session

from app.main import create_app
from app.services import jobs
from app.services.keys import LOCAL_CALLER
from core import db
from core.config import Settings, get_settings
from core.models import Job
from tests.unit.conftest import job_body, submit


def test_every_v1_route_still_documents_the_bearer_scheme(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    scheme = document["components"]["securitySchemes"]["HTTPBearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, operations in document["paths"].items():
        if path.startswith("/v1/"):
            for operation in operations.values():
                assert operation["security"] == [{"HTTPBearer": []}], path


def test_a_cpu_job_is_not_refused_by_a_gpu_quota_it_takes_nothing_from(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the GPU quota is lowered below what a user's jobs already ask for, GPU jobs are refused and jobs
    that ask for no GPUs are still taken: they cannot take the user past the GPU quota."""
    submit(TestClient(create_app()), parallel={"num_gpus": 2})
    monkeypatch.setenv("TRAINYARD_QUOTA_MAX_GPUS", "1")
    get_settings.cache_clear()
    client = TestClient(create_app())
    refused = client.post("/v1/jobs", json=job_body(parallel={"num_gpus": 1}))
    assert refused.status_code == 429, refused.text
    assert "ask for 2 GPUs; 1 more would pass TRAINYARD_QUOTA_MAX_GPUS=1" in refused.json()["detail"]
    submit(client)


def test_sqlite_lets_a_few_units_of_work_run_at_once(settings: Settings) -> None:
    """More would fight over the GIL and SQLite's write lock; the others wait their turn on the event loop."""
    running, most = 0, 0
    lock = threading.Lock()

    def unit(_session: Session) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    async def many() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(4 * db.SQLITE_UNITS_AT_ONCE):
                group.start_soon(db.run_in_session, unit)

    anyio.run(many)
    assert most == db.SQLITE_UNITS_AT_ONCE


def test_lookups_on_a_held_connection_see_each_commit_and_hold_no_snapshot(
    client: TestClient, session: Session
) -> None:
    """Job lookups on SQLite keep one connection per thread between reads: each read must still see what
    was committed since, and hold nothing afterwards that would keep the WAL from being checkpointed."""
    job_id = submit(client)["id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
    session.execute(update(Job).where(Job.id == job_id).values(status="running"))
    session.commit()
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "running"

    assert anyio.run(db.read_in_connection, jobs.public_job, job_id, LOCAL_CALLER).status == "running"
    held = db._held.connection
    assert not held.in_transaction() and not held.connection.dbapi_connection.in_transaction
    busy, _, _ = session.execute(text("PRAGMA wal_checkpoint(TRUNCATE)")).one()
    assert busy == 0, "a reader kept a snapshot open"

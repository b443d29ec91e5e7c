"""OneRowRead must return what Connection.execute returns for the same statement, and refuse what it can't."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from app.core.driver_read import OneRowRead
from app.services.jobs import _PUBLIC, JOBS
from core import db
from core.config import Settings
from core.models import Job
from tests.unit.conftest import submit

BY_ID = _PUBLIC.where(JOBS.c.id == bindparam("job_id"))


def test_rows_are_those_execute_returns(client: TestClient, session: Session) -> None:
    queued = [submit(client, priority=priority)["id"] for priority in (0, 5, 0)]
    running = submit(client)["id"]
    at = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    metrics = {"loss": 0.1 + 0.2, "eval_loss": float("inf"), "steps": 2**70}
    changes = {"status": "running", "running_at": at, "gpu_ids": [3, 1], "latest_metrics": metrics}
    session.execute(update(Job).where(Job.id == running).values(**changes))
    session.commit()
    read = OneRowRead(BY_ID)
    with db.get_engine().connect() as connection:
        for job_id in [*queued, running, 999]:
            expected = connection.execute(BY_ID, {"job_id": job_id}).one_or_none()
            fetched = read.fetch(connection, job_id=job_id)
            if expected is None:
                assert fetched is None
                continue
            assert fetched is not None
            found = read.convert(connection.dialect, fetched)
            assert found._asdict() == expected._asdict()
            assert [type(value) for value in found] == [type(value) for value in expected]
        fetched_queued = [read.fetch(connection, job_id=job_id) for job_id in queued]
        rows = [read.convert(connection.dialect, row) for row in fetched_queued if row is not None]
        assert [row.queue_position for row in rows] == [2, 1, 3]


def test_parameters_the_driver_cannot_take_as_given_are_refused(settings: Settings) -> None:
    converted = OneRowRead(select(JOBS.c.id).where(JOBS.c.created_at > datetime(2026, 1, 1, tzinfo=UTC)))
    listed = OneRowRead(select(JOBS.c.id).where(JOBS.c.id.in_([1, 2])))
    with db.get_engine().connect() as connection:
        with pytest.raises(TypeError, match="created_at"):
            converted.fetch(connection)
        with pytest.raises(TypeError, match="IN lists"):
            listed.fetch(connection)

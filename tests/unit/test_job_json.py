"""GET /v1/jobs/{id}'s body is rendered once per distinct row: it must still be the body of the row as it is
now, byte for byte, and a running job's ETA must still follow the clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.services import jobs
from app.services.keys import LOCAL_CALLER
from core import db
from core.models import Job, utcnow
from tests.unit.conftest import submit


def rendered_now(job_id: int) -> bytes:
    """The body as public_job gives it, rendered afresh."""
    with db.get_engine().connect() as connection:
        return jobs.public_job(connection, job_id, LOCAL_CALLER).model_dump_json().encode()


def test_a_body_follows_every_change_of_its_row(client: TestClient, session: Session) -> None:
    first, second = submit(client)["id"], submit(client)["id"]
    for _ in range(2):
        assert client.get(f"/v1/jobs/{second}").content == rendered_now(second)
    assert client.get(f"/v1/jobs/{second}").json()["queue_position"] == 2
    # A change elsewhere moves it in the queue; changes of its own show at once.
    assert client.post(f"/v1/jobs/{first}/cancel").status_code == 200
    assert client.get(f"/v1/jobs/{second}").json()["queue_position"] == 1
    assert client.patch(f"/v1/jobs/{second}", json={"priority": 7}).status_code == 200
    assert client.get(f"/v1/jobs/{second}").json()["priority"] == 7
    session.execute(update(Job).where(Job.id == second).values(status="failed", message="out of memory"))
    session.commit()
    body = client.get(f"/v1/jobs/{second}").content
    assert body == rendered_now(second) and b'"message":"out of memory"' in body


def test_a_running_job_s_body_follows_the_clock(
    client: TestClient, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = submit(client)["id"]
    started = utcnow()
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(status="running", running_at=started, progress_step=10, progress_total=20)
    )
    session.commit()
    # Keys and text that spell the progress field elsewhere in the body must not move where it is cut.
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(message='"progress":{"step":10,"total":20,"eta_s":null}', latest_metrics={"progress": 0.5})
    )
    session.commit()
    etas = []
    for elapsed in (timedelta(seconds=10), timedelta(seconds=30)):
        monkeypatch.setattr(jobs, "utcnow", lambda elapsed=elapsed: started + elapsed)
        body = client.get(f"/v1/jobs/{job_id}").content
        assert body == rendered_now(job_id)  # the cached body with its progress made again
        etas.append(client.get(f"/v1/jobs/{job_id}").json()["progress"]["eta_s"])
    assert etas == [10.0, 30.0]

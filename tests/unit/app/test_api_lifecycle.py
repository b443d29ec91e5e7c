"""Cancel, retry and delete, and the job_events rows each transition leaves."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.services import jobs
from core.config import Settings
from core.models import Checkpoint, JobEvent, Metric
from core.rundirs import SET_ASIDE
from core.states import JobStatus
from core.transitions import move
from tests.unit.conftest import enqueued, submit


def advance(session: Session, job_id: int, *path: JobStatus) -> None:
    """Walk the job along `path` the way a worker would."""
    current = JobStatus.QUEUED
    for status in path:
        assert move(session, job_id, current, status, reason="test")
        current = status
    session.commit()


def event_statuses(client: TestClient, job_id: int) -> list[tuple[str | None, str]]:
    events = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
    return [(event["from_status"], event["to_status"]) for event in events]


def test_cancel_queued_job_is_immediate(client: TestClient) -> None:
    job_id = submit(client)["id"]
    response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200
    job = response.json()
    assert job["status"] == "cancelled" and job["status_reason"] == "cancelled_by_user"
    assert job["finished_at"] is not None
    assert event_statuses(client, job_id) == [(None, "queued"), ("queued", "cancelled")]


def test_cancel_running_job_asks_the_worker(client: TestClient, session: Session) -> None:
    job_id = submit(client)["id"]
    advance(session, job_id, JobStatus.STARTING, JobStatus.RUNNING)
    response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 202
    assert response.json()["status"] == "cancelling"
    again = client.post(f"/v1/jobs/{job_id}/cancel")
    assert again.status_code == 202 and again.json()["status"] == "cancelling"
    assert event_statuses(client, job_id)[-1] == ("running", "cancelling")
    assert len(event_statuses(client, job_id)) == 4, "a second cancel adds no event"


def test_cancel_finished_job_is_a_conflict(client: TestClient, session: Session) -> None:
    job_id = submit(client)["id"]
    advance(session, job_id, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 409
    assert "already finished" in response.json()["detail"]
    assert client.post("/v1/jobs/999/cancel").status_code == 404


def test_events_of_unknown_job_is_404(client: TestClient) -> None:
    assert client.get("/v1/jobs/999/events").status_code == 404


def test_retry_makes_a_new_job_with_the_same_spec(client: TestClient, settings: Settings) -> None:
    old = submit(client, priority=7)
    assert enqueued(settings) == [old["id"]]
    client.post(f"/v1/jobs/{old['id']}/cancel")
    response = client.post(f"/v1/jobs/{old['id']}/retry")
    assert response.status_code == 201, response.text
    new = response.json()["job"]
    assert new["id"] != old["id"] and new["status"] == "queued"
    assert new["spec"] == old["spec"] and new["priority"] == 7
    assert enqueued(settings) == [old["id"], new["id"]]
    [event] = client.get(f"/v1/jobs/{new['id']}/events").json()["data"]
    assert event["message"] == f"retry of job {old['id']}"


def test_retry_refuses_jobs_that_did_not_fail(client: TestClient, session: Session) -> None:
    queued = submit(client)["id"]
    assert client.post(f"/v1/jobs/{queued}/retry").status_code == 409
    succeeded = submit(client)["id"]
    advance(session, succeeded, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    response = client.post(f"/v1/jobs/{succeeded}/retry")
    assert response.status_code == 409
    assert "POST /v1/jobs" in response.json()["detail"]


def test_delete_removes_rows_and_run_directory(
    client: TestClient, session: Session, settings: Settings
) -> None:
    job_id = submit(client)["id"]
    advance(session, job_id, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.FAILED)
    run = settings.runs_dir / str(job_id)
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "launcher.log").write_text("bye\n")
    session.add(Metric(job_id=job_id, name="loss", step=1, value=1.0))
    session.add(Checkpoint(job_id=job_id, step=1, epoch=0, path=str(run / "c.pt"), size_bytes=1))
    session.commit()
    response = client.delete(f"/v1/jobs/{job_id}")
    assert response.status_code == 204
    assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    assert not run.exists()
    assert list((settings.runs_dir / SET_ASIDE).iterdir()) == [], "the files are gone, not only moved"
    for table in (JobEvent, Metric, Checkpoint):
        assert session.scalar(select(func.count()).select_from(table)) == 0, table


def test_ids_of_deleted_jobs_and_checkpoints_are_never_given_again(
    client: TestClient, session: Session, settings: Settings
) -> None:
    submit(client)
    newest = submit(client)["id"]
    session.add(Checkpoint(job_id=newest, step=1, epoch=0, path="c.pt", size_bytes=1))
    session.commit()
    checkpoint_id = session.scalars(select(Checkpoint.id)).one()
    client.post(f"/v1/jobs/{newest}/cancel")
    assert client.delete(f"/v1/jobs/{newest}").status_code == 204
    assert submit(client)["id"] == newest + 1
    session.add(Checkpoint(job_id=newest + 1, step=1, epoch=0, path="c.pt", size_bytes=1))
    session.commit()
    assert session.scalars(select(Checkpoint.id)).one() == checkpoint_id + 1


def failed_with_files(client: TestClient, session: Session, settings: Settings) -> tuple[int, Path]:
    job_id = submit(client)["id"]
    advance(session, job_id, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.FAILED)
    run = settings.runs_dir / str(job_id)
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text("{}\n")
    return job_id, run


def test_a_delete_that_cannot_move_the_files_aside_keeps_the_job(
    client: TestClient, session: Session, settings: Settings
) -> None:
    job_id, run = failed_with_files(client, session, settings)
    (settings.runs_dir / SET_ASIDE).write_text("in the way")  # as root, permissions would not stop it
    response = client.delete(f"/v1/jobs/{job_id}")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert f"job {job_id} was not deleted" in response.json()["detail"]
    assert str(settings.runs_dir) not in response.json()["detail"]
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "failed"
    assert (run / "events.jsonl").read_text() == "{}\n"


def test_a_delete_whose_rows_stay_puts_the_files_back(
    client: TestClient, session: Session, settings: Settings
) -> None:
    job_id, run = failed_with_files(client, session, settings)
    session.execute(text("CREATE TRIGGER keep BEFORE DELETE ON jobs BEGIN SELECT RAISE(ABORT, 'kept'); END"))
    session.commit()
    with pytest.raises(IntegrityError, match="kept"):
        jobs.delete_job(session, settings, jobs.get_job(session, job_id))
    assert (run / "events.jsonl").read_text() == "{}\n"
    assert list((settings.runs_dir / SET_ASIDE).iterdir()) == []


def test_delete_refuses_an_active_job(client: TestClient, session: Session) -> None:
    job_id = submit(client)["id"]
    advance(session, job_id, JobStatus.STARTING)
    response = client.delete(f"/v1/jobs/{job_id}")
    assert response.status_code == 409
    assert f"POST /v1/jobs/{job_id}/cancel" in response.json()["detail"]
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "starting"

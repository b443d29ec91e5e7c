"""Submitting, listing and reading jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.services import submit as submit_service
from core.config import Settings
from core.models import Checkpoint, Job, JobEvent, utcnow
from tests.unit.conftest import enqueued, job_body, submit


def test_submit_stores_the_job_and_rings_the_doorbell_after_commit(
    client: TestClient, session: Session, settings: Settings
) -> None:
    body = job_body(parallel={"nproc_per_node": 2}, priority=5)
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job, plan = response.json()["job"], response.json()["plan"]
    assert job["status"] == "queued" and job["priority"] == 5 and job["queue_position"] == 1
    assert job["spec"] == body, "the spec as submitted, without the defaults the plan resolved"
    assert plan == job["plan"]
    assert plan["strategy"] == "ddp" and plan["world_size"] == 2 and plan["per_rank_batch"] == 4
    assert plan["argv"][-2:] == ["--run-dir", f"$TRAINYARD_RUNS_DIR/{job['id']}"]
    assert enqueued(settings) == [job["id"]]
    [event] = session.scalars(select(JobEvent).where(JobEvent.job_id == job["id"]))
    assert (event.from_status, event.to_status, event.reason) == (None, "queued", "submitted")


def test_dry_run_returns_the_plan_and_stores_nothing(
    client: TestClient, session: Session, settings: Settings
) -> None:
    response = client.post(
        "/v1/jobs", params={"dry_run": "true"}, json=job_body(parallel={"nproc_per_node": 2})
    )
    assert response.status_code == 200, response.text
    assert response.json()["job"] is None
    argv = response.json()["plan"]["argv"]
    # The server's folders show as their variables, not as its absolute paths.
    assert argv[0] == "python" and argv[-2:] == ["--run-dir", "$TRAINYARD_RUNS_DIR/<job-id>"]
    assert argv[argv.index("--nproc-per-node") + 1] == "2"
    assert session.scalar(select(func.count()).select_from(Job)) == 0
    assert enqueued(settings) == []


@pytest.mark.parametrize(
    "parallel", [{"nproc_per_node": 2}, {"strategy": "ddp", "nnodes": 2}], ids=["one host", "two hosts"]
)
def test_a_submission_s_plan_holds_the_argv_its_dry_run_showed_with_the_job_s_id(
    client: TestClient, parallel: dict[str, object]
) -> None:
    body = job_body(parallel=parallel)
    planned = client.post("/v1/jobs", params={"dry_run": "true"}, json=body).json()["plan"]["argv"]
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job_id = response.json()["job"]["id"]
    argv = response.json()["plan"]["argv"]
    assert argv and argv == [arg.replace(submit_service.DRY_RUN_ID, str(job_id)) for arg in planned]
    assert client.get(f"/v1/jobs/{job_id}").json()["plan"]["argv"] == argv


def test_resume_from_puts_the_checkpoint_path_in_the_plan(
    client: TestClient, session: Session, settings: Settings
) -> None:
    source = submit(client)
    path = str(settings.runs_dir / str(source["id"]) / "checkpoints" / "step4.pt")
    session.add(Checkpoint(job_id=source["id"], step=4, epoch=0, path=path, size_bytes=10))
    session.commit()
    checkpoint_id = session.scalar(select(Checkpoint.id))
    response = client.post("/v1/jobs", json=job_body(checkpoint={"resume_from": checkpoint_id}))
    assert response.status_code == 201, response.text
    # The worker resumes from the stored real path; the API shows it under the runs folder's variable.
    shown = f"$TRAINYARD_RUNS_DIR/{source['id']}/checkpoints/step4.pt"
    assert response.json()["plan"]["resume_path"] == shown
    assert client.get(f"/v1/jobs/{response.json()['job']['id']}").json()["plan"]["resume_path"] == shown
    assert session.get_one(Job, response.json()["job"]["id"]).plan["resume_path"] == path


def test_get_unknown_job_is_a_404_problem(client: TestClient) -> None:
    response = client.get("/v1/jobs/999")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"] == "job 999 does not exist; list jobs with GET /v1/jobs"


def test_list_is_newest_first_and_pages_by_cursor(client: TestClient) -> None:
    ids = [submit(client)["id"] for _ in range(5)]
    first = client.get("/v1/jobs", params={"limit": 2}).json()
    assert [job["id"] for job in first["data"]] == ids[:-3:-1]
    second = client.get("/v1/jobs", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [job["id"] for job in second["data"]] == ids[2:0:-1]
    last = client.get("/v1/jobs", params={"limit": 2, "cursor": second["next_cursor"]}).json()
    assert [job["id"] for job in last["data"]] == ids[:1]
    assert last["next_cursor"] is None
    assert client.get("/v1/jobs", params={"limit": 201}).status_code == 422
    assert client.get("/v1/jobs", params={"limit": 0}).status_code == 422


def test_list_filters_by_status(client: TestClient) -> None:
    kept = submit(client)["id"]
    cancelled = submit(client)["id"]
    client.post(f"/v1/jobs/{cancelled}/cancel")
    listed = client.get("/v1/jobs", params={"status": "queued"}).json()
    assert [job["id"] for job in listed["data"]] == [kept]
    response = client.get("/v1/jobs", params={"status": "done"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "status"
    assert "'queued'" in response.json()["detail"] and "'timed_out'" in response.json()["detail"]


def test_queue_position_follows_priority_then_age(client: TestClient) -> None:
    low = submit(client, priority=0)["id"]
    high = submit(client, priority=10)["id"]
    low_later = submit(client, priority=0)["id"]
    positions = {job_id: client.get(f"/v1/jobs/{job_id}").json()["queue_position"] for job_id in (low, high)}
    assert positions == {high: 1, low: 2}
    listed = {job["id"]: job["queue_position"] for job in client.get("/v1/jobs").json()["data"]}
    assert listed == {high: 1, low: 2, low_later: 3}
    client.post(f"/v1/jobs/{high}/cancel")
    assert client.get(f"/v1/jobs/{high}").json()["queue_position"] is None
    assert client.get(f"/v1/jobs/{low_later}").json()["queue_position"] == 2


def test_progress_reports_an_eta_while_running(client: TestClient, session: Session) -> None:
    job_id = submit(client)["id"]
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(
            status="running",
            running_at=utcnow() - timedelta(seconds=30),
            progress_step=25,
            progress_total=100,
            latest_metrics={"loss": 0.5},
        )
    )
    session.commit()
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["progress"]["step"] == 25 and job["progress"]["total"] == 100
    assert 85 <= job["progress"]["eta_s"] <= 95
    assert job["latest_metrics"] == {"loss": 0.5}
    assert job["queue_position"] is None
    assert job["running_at"].endswith("Z")


def test_idempotency_key_replays_the_same_body_and_refuses_another(
    client: TestClient, session: Session, settings: Settings
) -> None:
    headers = {"Idempotency-Key": "nightly-42"}
    first = client.post("/v1/jobs", json=job_body(), headers=headers)
    assert first.status_code == 201
    again = client.post("/v1/jobs", json=job_body(), headers=headers)
    assert again.status_code == 200
    assert again.json()["job"]["id"] == first.json()["job"]["id"]
    other = client.post("/v1/jobs", json=job_body(priority=3), headers=headers)
    assert other.status_code == 409
    assert other.json()["errors"][0]["field"] == "Idempotency-Key"
    assert "new key" in other.json()["detail"]
    assert session.scalar(select(func.count()).select_from(Job)) == 1
    assert enqueued(settings) == [first.json()["job"]["id"]]


def test_oversized_body_is_refused_with_413(client: TestClient, session: Session) -> None:
    body = job_body(name="x" * (1 << 20))
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    streamed = client.post(
        "/v1/jobs",
        content=iter([b"{" + b" " * (1 << 19), b" " * (1 << 19), b"  }"]),
        headers={"content-type": "application/json"},
    )
    assert streamed.status_code == 413
    assert session.scalar(select(func.count()).select_from(Job)) == 0


def test_idempotency_key_race_answers_as_a_replay(
    client: TestClient, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two requests with one key both miss the lookup; the unique constraint turns the loser into a replay."""
    first = client.post("/v1/jobs", json=job_body(), headers={"Idempotency-Key": "k"}).json()["job"]
    real_lookup = submit_service.job_by_key
    misses = iter([None])
    monkeypatch.setattr(
        submit_service, "job_by_key", lambda s, owner, key: next(misses, real_lookup(s, owner, key))
    )
    again = client.post("/v1/jobs", json=job_body(), headers={"Idempotency-Key": "k"})
    assert again.status_code == 200, again.text
    assert again.json()["job"]["id"] == first["id"]
    assert session.scalar(select(func.count()).select_from(Job)) == 1


def test_the_argv_a_worker_ran_is_shown_without_the_server_s_paths(
    client: TestClient, session: Session, settings: Settings
) -> None:
    job_id = submit(client)["id"]
    ran = ["/srv/trainyard/.venv/bin/python3.12", "-m", "torch.distributed.run", "--run-dir"]
    job = session.get(Job, job_id)
    assert job is not None
    job.plan = {**job.plan, "argv": [*ran, str(settings.runs_dir / str(job_id))]}
    session.commit()
    shown = client.get(f"/v1/jobs/{job_id}").json()["plan"]["argv"]
    assert shown == ["python3.12", *ran[1:], f"$TRAINYARD_RUNS_DIR/{job_id}"]
    session.refresh(job)
    assert job.plan["argv"][0] == ran[0], "the stored plan keeps what the worker ran"

"""depends_on at submission: ids the caller may see (another user's job is missing, as everywhere), at most
MAX_DEPENDENCIES, each once, none ended otherwise than succeeded; checkpoint.resume_from_job among them. A
job whose dependencies have not all succeeded is queued waiting for them, and says which."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings
from core.dependencies import WAITING_FOR_JOBS
from core.keys import create_key
from core.models import Job
from core.states import JobStatus
from core.transitions import move
from jobspec.spec import MAX_DEPENDENCIES
from tests.unit.conftest import assert_problem, job_body, submit


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_depends_on_names_existing_jobs_each_once(client: TestClient) -> None:
    first = submit(client)["id"]
    unknown = client.post("/v1/jobs", json=job_body(depends_on=[first, 999]))
    assert_problem(unknown, "depends_on", "job 999 does not exist")
    twice = client.post("/v1/jobs", json=job_body(depends_on=[first, first]))
    assert_problem(twice, "depends_on", "lists a job twice")
    too_many = client.post("/v1/jobs", json=job_body(depends_on=list(range(1, MAX_DEPENDENCIES + 2))))
    assert_problem(too_many, "depends_on", str(MAX_DEPENDENCIES))
    # The next id is the job's own: it does not exist yet, so a job cannot wait for itself.
    itself = client.post("/v1/jobs", json=job_body(depends_on=[first + 1]))
    assert_problem(itself, "depends_on", f"job {first + 1} does not exist")
    dry = client.post("/v1/jobs?dry_run=true", json=job_body(depends_on=[999]))
    assert_problem(dry, "depends_on", "job 999 does not exist")


def test_a_dependency_that_ended_otherwise_is_refused(client: TestClient) -> None:
    first = submit(client)["id"]
    assert client.post(f"/v1/jobs/{first}/cancel").status_code == 200
    refused = client.post("/v1/jobs", json=job_body(depends_on=[first]))
    assert_problem(refused, "depends_on", f"job {first} ended cancelled")
    assert f"trainyard retry {first}" in refused.json()["detail"]


def test_resume_from_job_must_be_awaited(client: TestClient) -> None:
    first = submit(client)["id"]
    not_awaited = client.post("/v1/jobs", json=job_body(checkpoint={"resume_from_job": first}))
    assert_problem(not_awaited, "checkpoint.resume_from_job", "not in depends_on")
    both = client.post(
        "/v1/jobs",
        json=job_body(depends_on=[first], checkpoint={"resume_from_job": first, "resume_from": 1}),
    )
    assert_problem(both, "checkpoint.resume_from_job", "keep one")
    resumed = submit(client, depends_on=[first], checkpoint={"resume_from_job": first})
    assert resumed["parent_id"] == first


def test_a_job_waits_for_the_dependencies_not_yet_succeeded(client: TestClient, session: Session) -> None:
    done, running = submit(client)["id"], submit(client)["id"]
    for to_status in (JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED):
        assert move(session, done, JobStatus(session.get_one(Job, done).status), to_status)
    session.commit()
    job = submit(client, depends_on=[done, running])
    assert (job["status"], job["status_reason"]) == (JobStatus.QUEUED, WAITING_FOR_JOBS)
    assert job["message"] == f"waiting for job {running} to succeed (depends_on)"
    assert job["spec"]["depends_on"] == [done, running]
    queue = client.get("/v1/queue").json()["data"]
    assert [entry["reason"] for entry in queue if entry["job_id"] == job["id"]] == [job["message"]]
    free = submit(client, depends_on=[done])
    assert (free["status_reason"], session.get_one(Job, free["id"]).waiting_on) == (None, 0)


def test_another_users_job_is_missing(auth_on: Settings, session: Session) -> None:
    alice, bob, admin = (create_key(session, user, admin=user == "root") for user in ("alice", "bob", "root"))
    client = TestClient(create_app())
    alices = client.post("/v1/jobs", json=job_body(), headers=bearer(alice)).json()["job"]["id"]
    hidden = client.post("/v1/jobs", json=job_body(depends_on=[alices]), headers=bearer(bob))
    assert_problem(hidden, "depends_on", f"job {alices} does not exist")
    allowed = client.post("/v1/jobs", json=job_body(depends_on=[alices]), headers=bearer(admin))
    assert allowed.status_code == 201, allowed.text

"""GET /v1/compare: how jobs differ in what they ran, field by field and in one line."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from app.services.specdiff import diff_jobs
from core.config import Settings
from core.keys import create_key
from core.models import Job
from tests.unit.conftest import assert_problem, job_body, submit


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_differences_of_spec_and_plan_in_a_line_and_field_by_field(client: TestClient) -> None:
    base = submit(client, name="ddp-fast", train={"max_steps": 5, "batch_size": 8, "lr": 0.1})
    other = submit(
        client,
        name="single-slow",
        train={"max_steps": 5, "batch_size": 8, "lr": 0.05},
        parallel={"strategy": "single"},
        checkpoint={"every_n_steps": 2},
        metrics={"every_n_steps": 3},
        priority=9,
    )
    # Left "auto", the first job's planner chose single too: the spec's strategy differs, not what ran.
    diff = client.get("/v1/compare", params={"job": [base["id"], other["id"]]})
    assert diff.status_code == 200, diff.text
    body = diff.json()
    assert [(d["field"], d["label"], d["values"]) for d in body["differences"]] == [
        ("train.lr", "lr", ["0.1", "0.05"]),
        ("checkpoint.every_n_steps", "checkpoint.every_n_steps", ["0", "2"]),
        ("metrics.every_n_steps", "metrics.every_n_steps", ["10", "3"]),
    ]
    assert body["summary"] == (
        "lr 0.1 vs 0.05, checkpoint.every_n_steps 0 vs 2, metrics.every_n_steps 10 vs 3"
    )
    assert [(j["id"], j["name"], j["differs"]) for j in body["jobs"]] == [
        (base["id"], "ddp-fast", "lr 0.1, checkpoint.every_n_steps 0, metrics.every_n_steps 10"),
        (other["id"], "single-slow", "lr 0.05, checkpoint.every_n_steps 2, metrics.every_n_steps 3"),
    ]


def test_planned_choices_and_fields_only_one_job_has(client: TestClient) -> None:
    ddp = submit(
        client,
        model={"arch": "mlp", "kwargs": {"depth": 3}},
        parallel={"strategy": "ddp", "nproc_per_node": 2},
    )
    single = submit(client, precision="bf16")
    body = client.get("/v1/compare", params={"job": [ddp["id"], single["id"], single["id"]]}).json()
    assert body["summary"] == (
        "strategy ddp vs single vs single, world_size 2 vs 1 vs 1, precision fp32 vs bf16 vs bf16, "
        "depth 3 vs - vs -, parallel.nproc_per_node 2 vs - vs -"
    )
    alike = client.get("/v1/compare", params={"job": [single["id"]]}).json()
    assert (alike["differences"], alike["summary"]) == ([], "the specs and plans agree")


def test_ids_are_checked_and_another_users_job_is_missing(auth_on: Settings, session: Session) -> None:
    alice, bob = (create_key(session, user, admin=False) for user in ("alice", "bob"))
    client = TestClient(create_app())
    job_id = client.post("/v1/jobs", json=job_body(), headers=bearer(alice)).json()["job"]["id"]
    assert client.get("/v1/compare", params={"job": [job_id]}, headers=bearer(alice)).status_code == 200
    hidden = client.get("/v1/compare", params={"job": [job_id]}, headers=bearer(bob))
    assert hidden.status_code == 404 and f"job {job_id} does not exist" in hidden.json()["detail"]
    assert_problem(
        client.get("/v1/compare", params={"job": "07"}, headers=bearer(alice)), "job.0", "digits only"
    )
    assert_problem(client.get("/v1/compare", headers=bearer(alice)), "job", "required")
    too_many = client.get("/v1/compare", params={"job": [job_id] * 21}, headers=bearer(alice))
    assert too_many.status_code == 422


def test_two_fields_that_would_share_a_short_name_keep_their_paths() -> None:
    def job(job_id: int, lr: float) -> Job:
        spec = {"model": {"factory": "models:build", "kwargs": {"lr": lr}}, "train": {"lr": lr}}
        return Job(id=job_id, name=f"j{job_id}", spec=spec, plan={"strategy": "single"})

    diff = diff_jobs([job(1, 0.1), job(2, 0.2)])
    assert diff.summary == "model.kwargs.lr 0.1 vs 0.2, train.lr 0.1 vs 0.2"

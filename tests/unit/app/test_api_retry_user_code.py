"""Retry of user-code jobs (issue 28 #1): a job's spec is stored as submitted, so a retry of a bundle job
with data.factory, or of a program, validates what the user wrote (from its checkpoint and from scratch);
a row stored with every default written (before 0011) still retries; one that cannot is a 422 naming why."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from core.config import Settings
from core.models import Job
from core.states import JobStatus
from jobspec.spec import JobSpec
from tests.unit.app.test_api_retry import checkpoint, retry
from tests.unit.code_archives import bundle_archive
from tests.unit.conftest import assert_problem

GZIP = {"Content-Type": "application/gzip"}
# Parsed at submit, never run: the bodies need no torch.
FILES = {
    "models.py": "def build(width=8):\n    ...\n\n\ndef loss(model, batch):\n    ...\n",
    "data.py": "def build(root=None, size=64):\n    ...\n",
    "train.py": "print('training')\n",
}


@pytest.fixture
def code(client: TestClient) -> str:
    response = client.post("/v1/code", content=bundle_archive(FILES), headers=GZIP)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def factory_body(code: str) -> dict[str, Any]:
    return {
        "name": "byom",
        "code": code,
        "model": {"factory": "models:build", "kwargs": {"width": 16}},
        "data": {"factory": "data:build", "kwargs": {"size": 32}, "loader_workers": 0},
        "train": {"loss": "models:loss", "max_steps": 5, "batch_size": 8},
        "parallel": {"strategy": "ddp", "nproc_per_node": 2},
    }


def program_body(code: str) -> dict[str, Any]:
    return {
        "name": "program",
        "code": code,
        "program": {"entrypoint": ["python", "train.py"], "hyperparameters": {"lr": 0.1}},
        "parallel": {"nproc_per_node": 2},
        "train": {"max_steps": 5},
    }


def submitted(client: TestClient, body: dict[str, Any]) -> int:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job_id: int = response.json()["job"]["id"]
    return job_id


def fail(session: Session, job_id: int, **columns: Any) -> None:
    """The job as a worker leaves a failed one (and any other column as an older service stored it)."""
    session.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.FAILED, **columns))
    session.commit()


def resumed(body: dict[str, Any], checkpoint_id: int) -> dict[str, Any]:
    return body | {"checkpoint": {**body.get("checkpoint", {}), "resume_from": checkpoint_id}}


def assert_retries_as_submitted(
    client: TestClient, session: Session, settings: Settings, job_id: int, body: dict[str, Any]
) -> None:
    """From its checkpoint and from scratch, each retry stores the spec the user wrote (plus resume_from)."""
    saved = checkpoint(session, settings, job_id, 10)
    status, latest = retry(client, job_id)
    assert status == 201
    assert latest["job"]["spec"] == resumed(body, saved.id)
    assert client.get(f"/v1/jobs/{latest['job']['id']}").json()["spec"] == resumed(body, saved.id)
    status, scratch = retry(client, job_id, "?from=scratch")
    assert status == 201
    assert scratch["job"]["spec"] == body


@pytest.mark.parametrize("make_body", [factory_body, program_body], ids=["factories", "program"])
def test_a_user_code_job_retries_as_submitted(
    client: TestClient, session: Session, settings: Settings, code: str, make_body: Any
) -> None:
    body = make_body(code)
    job_id = submitted(client, body)
    assert client.get(f"/v1/jobs/{job_id}").json()["spec"] == body
    fail(session, job_id)
    assert_retries_as_submitted(client, session, settings, job_id, body)


def test_a_row_stored_with_its_defaults_written_still_retries(
    client: TestClient, session: Session, settings: Settings, code: str
) -> None:
    body = factory_body(code)
    job_id = submitted(client, body)
    # How the service stored specs before 0011: every default written, data.bag_size beside data.factory.
    expanded = JobSpec.model_validate(body).model_dump(mode="json")
    assert expanded["data"]["bag_size"] == 16
    fail(session, job_id, spec=expanded)
    assert_retries_as_submitted(client, session, settings, job_id, body)


def test_a_stored_spec_that_no_longer_plans_is_refused_naming_its_field(
    client: TestClient, session: Session, code: str
) -> None:
    body = factory_body(code)
    job_id = submitted(client, body)
    # Not a default: no form of it plans, and the 422 says what the stored spec itself gets wrong.
    fail(session, job_id, spec=body | {"data": {**body["data"], "bag_size": 3}})
    response = client.post(f"/v1/jobs/{job_id}/retry")
    assert_problem(response, "data.bag_size", "describes the built-in datasets")

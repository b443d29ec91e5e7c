"""A program job at the API: submitted with a bundle holding its script, planned like any job, its
hyperparameters stored and shown; and each way a program spec is refused with a 422 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.config import Settings
from tests.unit.app.test_api_code import GZIP
from tests.unit.code_archives import bundle_archive
from tests.unit.conftest import assert_nothing_stored, assert_problem

FILES = {"train.py": "print('hi')\n", "pkg/__init__.py": "", "pkg/__main__.py": "print('hi')\n"}
PROGRAM = {
    "entrypoint": ["python", "train.py", "--lr", "3e-4"],
    "hyperparameters": {"lr": 3e-4, "warmup": 100},
}


@pytest.fixture
def code(client: TestClient) -> str:
    response = client.post("/v1/code", content=bundle_archive(FILES), headers=GZIP)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def program_body(bundle: str, **sections: Any) -> dict[str, Any]:
    return {
        "code": bundle,
        "program": PROGRAM,
        "parallel": {"nproc_per_node": 2},
        "train": {"max_steps": 5},
    } | sections


def test_a_program_job_is_planned_and_shows_its_hyperparameters(client: TestClient, code: str) -> None:
    created = client.post("/v1/jobs", json=program_body(code))
    assert created.status_code == 201, created.text
    job = client.get(f"/v1/jobs/{created.json()['job']['id']}").json()
    assert job["spec"]["program"] == PROGRAM
    assert "model" not in job["spec"] or job["spec"]["model"] is None
    assert (job["plan"]["strategy"], job["plan"]["world_size"]) == ("ddp", 2)


def test_a_module_entrypoint_is_taken(client: TestClient, code: str) -> None:
    body = program_body(code, program={"entrypoint": ["python", "-m", "pkg", "--x"]})
    assert client.post("/v1/jobs", json=body).status_code == 201


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"model": {"arch": "mlp"}}, "model", "program and model exclude each other"),
        ({"data": {"dataset": "synthetic"}}, "data", "program and data exclude each other"),
        ({"program": {"entrypoint": ["python", 3]}}, "program.entrypoint.1", "valid string"),
        ({"program": {"entrypoint": "python train.py"}}, "program.entrypoint", "valid list"),
        (
            {"program": {"entrypoint": ["python", "../train.py"]}},
            "program.entrypoint",
            "inside the code bundle",
        ),
        ({"program": {"entrypoint": ["python", "gone.py"]}}, "program.entrypoint", "holds no such file"),
        ({"program": {"entrypoint": ["python", "-m"]}}, "program.entrypoint", "names no module"),
        ({"code": None}, "code", "names no bundle"),
        (
            {"parallel": {"strategy": "pipeline", "nproc_per_node": 2}},
            "parallel.strategy",
            "single, ddp or fsdp",
        ),
    ],
    ids=[
        "model",
        "data",
        "not-strings",
        "a-string",
        "outside",
        "missing",
        "no-module",
        "no-code",
        "pipeline",
    ],
)
def test_a_bad_program_spec_is_refused_naming_the_field(
    client: TestClient,
    session: Session,
    settings: Settings,
    code: str,
    change: dict[str, Any],
    field: str,
    fragment: str,
) -> None:
    for dry_run in (False, True):
        response = client.post("/v1/jobs", json=program_body(code, **change), params={"dry_run": dry_run})
        assert_problem(response, field, fragment)
    assert_nothing_stored(session, settings)

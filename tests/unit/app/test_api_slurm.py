"""The API with Slurm deciding (TRAINYARD_EXECUTOR=slurm): a plan shows the batch script the worker will
submit, a spec cannot pin hosts or GPUs, and no worker's inventory judges a spec (Slurm's reason does)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings, get_settings
from core.models import Worker, utcnow
from tests.unit.conftest import assert_problem, job_body


@pytest.fixture
def slurm(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("TRAINYARD_EXECUTOR", "slurm")
    get_settings.cache_clear()
    yield TestClient(create_app())
    get_settings.cache_clear()


def test_the_plan_carries_the_batch_script_and_a_job_its_slurm_id(slurm: TestClient) -> None:
    body = job_body(
        parallel={"strategy": "ddp", "nproc_per_node": 1, "nnodes": 3},
        train={"max_steps": 5, "batch_size": 9},
    )
    dry = slurm.post("/v1/jobs", params={"dry_run": True}, json=body).json()
    assert "#SBATCH --nodes=3" in dry["plan"]["batch_script"], dry
    job = slurm.post("/v1/jobs", json=body).json()["job"]
    assert f"#SBATCH --job-name=trainyard-{job['id']}" in job["plan"]["batch_script"]
    assert job["slurm_job_id"] is None  # not handed over yet


@pytest.mark.parametrize(
    ("parallel", "field"), [({"host": "node1"}, "parallel.host"), ({"gpus": [0]}, "parallel.gpus")]
)
def test_a_spec_cannot_pin_what_slurm_allocates(
    slurm: TestClient, parallel: dict[str, object], field: str
) -> None:
    assert_problem(slurm.post("/v1/jobs", json=job_body(parallel=parallel)), field, "parallel.nnodes")


def test_no_registered_host_judges_a_spec(slurm: TestClient, session: Session) -> None:
    # A worker once registered here with no GPUs: locally that refuses a GPU job; Slurm may have GPU nodes.
    session.add(Worker(id="w", host="login", gpus=[], heartbeat_at=utcnow()))
    session.commit()
    body = job_body(parallel={"strategy": "ddp", "num_gpus": 2})
    assert slurm.post("/v1/jobs", json=body).status_code == 201


def test_locally_the_plan_has_no_batch_script(client: TestClient) -> None:
    assert client.post("/v1/jobs", json=job_body()).json()["job"]["plan"]["batch_script"] is None

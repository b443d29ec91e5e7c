"""POST /v1/sweeps: a space that cannot make a valid trial is refused naming the field; a valid one makes its
first `parallel` trials as ordinary jobs, rung once committed."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.services.submit import DRY_RUN_ID
from core.config import Settings
from core.models import Job, Sweep
from tests.unit.conftest import assert_problem, enqueued, job_body


def sweep_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "lr-search",
        "spec": job_body(),
        "parameters": {"train.lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True}},
        "objective": {"metric": "eval_loss", "goal": "minimize"},
        "max_trials": 4,
        "parallel": 2,
        "seed": 0,
    }
    body.update(changes)
    return body


def test_a_sweep_makes_its_first_trials_as_jobs(
    client: TestClient, session: Session, settings: Settings
) -> None:
    response = client.post("/v1/sweeps", json=sweep_body())
    assert response.status_code == 201, response.text
    sweep = response.json()
    assert sweep["trials"] == {"running": 2, "completed": 0, "pruned": 0, "failed": 0}
    trials = client.get(f"/v1/sweeps/{sweep['id']}/trials").json()["data"]
    assert [trial["number"] for trial in trials] == [0, 1]
    for trial in trials:
        job = client.get(f"/v1/jobs/{trial['job_id']}").json()
        assert (job["sweep_id"], job["trial"], job["status"]) == (sweep["id"], trial["number"], "queued")
        assert job["spec"]["train"]["lr"] == trial["params"]["train.lr"]
        assert 1e-4 <= trial["params"]["train.lr"] <= 1.0
    assert sorted(enqueued(settings)) == sorted(trial["job_id"] for trial in trials)
    assert [s["id"] for s in client.get("/v1/sweeps").json()["data"]] == [sweep["id"]]


def test_a_parameter_path_the_spec_does_not_have_is_named(client: TestClient, session: Session) -> None:
    body = sweep_body(parameters={"train.lrr": {"type": "float", "low": 0.1, "high": 1.0}})
    assert_problem(client.post("/v1/sweeps", json=body), "parameters.train.lrr", "low corner")
    assert session.scalar(select(func.count()).select_from(Job)) == 0
    assert session.scalar(select(func.count()).select_from(Sweep)) == 0


def test_a_float_where_the_spec_takes_an_integer_is_named(client: TestClient) -> None:
    body = sweep_body(parameters={"train.batch_size": {"type": "float", "low": 8, "high": 64}})
    assert_problem(client.post("/v1/sweeps", json=body), "parameters.train.batch_size", "integer")


def test_a_corner_the_planner_refuses_is_named(client: TestClient) -> None:
    # plateau decays on evaluations: the low corner, which turns them off, is no valid job.
    spec = job_body(train={"max_steps": 5, "batch_size": 8, "schedule": "plateau"})
    body = sweep_body(spec=spec, parameters={"train.eval_every_epochs": {"type": "int", "low": 0, "high": 2}})
    assert_problem(client.post("/v1/sweeps", json=body), "parameters.train.eval_every_epochs", "low corner")


def test_a_grid_over_a_float_needs_its_points(client: TestClient) -> None:
    response = client.post("/v1/sweeps", json=sweep_body(sampler="grid"))
    assert response.status_code == 422, response.text
    assert "grid_points" in response.text and "parameters.train.lr" in response.text


def test_a_base_spec_fault_is_named_under_spec(client: TestClient) -> None:
    body = sweep_body(spec=job_body(train={"max_steps": 5, "batch_size": 8, "epochs_typo": 1}))
    assert_problem(client.post("/v1/sweeps", json=body), "spec.train.epochs_typo", "Extra inputs")


def test_a_trial_s_plan_holds_the_argv_a_submission_of_its_spec_would(client: TestClient) -> None:
    sweep = client.post("/v1/sweeps", json=sweep_body(parallel=1)).json()
    trial = client.get(f"/v1/sweeps/{sweep['id']}/trials").json()["data"][0]
    job = client.get(f"/v1/jobs/{trial['job_id']}").json()
    planned = client.post("/v1/jobs", params={"dry_run": "true"}, json=job["spec"]).json()["plan"]["argv"]
    assert job["plan"]["argv"], "the torchrun command the worker would run"
    assert job["plan"]["argv"] == [arg.replace(DRY_RUN_ID, str(job["id"])) for arg in planned]

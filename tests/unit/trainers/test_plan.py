"""The spec checks each field alone; the planner checks how they fit together, the model and the cluster, and
names every problem it finds with its field and fix; the 422 carries those fields as they are."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.api.errors import install_error_handlers
from app.services.errors import InvalidSpec
from app.specdoc import render
from jobspec.catalog.archs import ARCHS, Arch, Kwarg, about
from jobspec.cluster import Inventory
from jobspec.plan import resolve_plan
from jobspec.problems import Problem, SpecError
from jobspec.spec import JobSpec, Strategy
from jobspec.stages import default_split_at
from tests.unit.conftest import job_body


def spec(**sections: Any) -> JobSpec:
    return JobSpec.model_validate(job_body(**sections))


def refused_fields(job: JobSpec, inventory: Inventory | None = None) -> list[str]:
    with pytest.raises(SpecError) as refused:
        resolve_plan(job, inventory or Inventory())
    return [problem.field for problem in refused.value.problems]


def test_the_spec_checks_fields_alone_and_leaves_how_they_fit_to_the_planner() -> None:
    with pytest.raises(ValidationError) as invalid:
        JobSpec.model_validate(job_body(parallel={"gpus": [1, 1]}))
    assert [error["loc"] for error in invalid.value.errors()] == [("parallel", "gpus")]
    misfit = spec(model={"arch": "mlp", "kwargs": {"width": 3}}, data={"dataset": "cifar10"})
    assert refused_fields(misfit) == ["model.kwargs.width", "data.root"]


def test_one_submission_with_two_bad_fields_is_told_of_both(client: TestClient) -> None:
    body = job_body(model={"arch": "mlp", "kwargs": {"depth": 99}}, precision="fp16")
    for dry_run in (False, True):
        response = client.post("/v1/jobs", json=body, params={"dry_run": dry_run})
        assert response.status_code == 422, response.text
        errors = response.json()["errors"]
        assert [error["field"] for error in errors] == ["precision", "model.kwargs.depth"]
        assert errors[1] == {
            "field": "model.kwargs.depth",
            "message": "model.kwargs.depth=99 is out of range; use 1..32",
            "fix": "use 1..32",
        }


def test_the_field_blamed_is_the_missing_one_not_the_first_the_message_names(client: TestClient) -> None:
    response = client.post("/v1/jobs", json=job_body(data={"dataset": "cifar10"}), params={"dry_run": True})
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert error["field"] == "data.root" and error["message"].startswith("data.dataset cifar10 is read")


def test_a_spec_errors_fields_are_used_verbatim() -> None:
    app = FastAPI()
    install_error_handlers(app)
    # Each message names other fields first: the 422 must still blame the field each problem carries.
    problems = [
        Problem("parallel.split_at", "train.batch_size and data.root do not matter here", "move it"),
        Problem("made.up", "priority is named here", "nothing"),
    ]

    @app.get("/planned")
    def planned() -> None:
        raise SpecError(problems)

    @app.get("/stored")
    def stored() -> None:
        raise InvalidSpec("checkpoint.resume_from", "train.lr is named here; resume from another one")

    client = TestClient(app)
    errors = client.get("/planned").json()["errors"]
    assert [(error["field"], error["fix"]) for error in errors] == [
        ("parallel.split_at", "move it"),
        ("made.up", "nothing"),
    ]
    response = client.get("/stored")
    assert response.status_code == 422 and response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"] == [
        {"field": "checkpoint.resume_from", "message": "train.lr is named here; resume from another one"}
    ]


def test_the_cluster_is_judged_from_the_inventory_given() -> None:
    two_gpus = Inventory({"a": (0, 1)})
    assert refused_fields(spec(parallel={"gpus": [2]}), two_gpus) == ["parallel.gpus"]
    assert refused_fields(spec(parallel={"num_gpus": 4}), two_gpus) == ["parallel.num_gpus"]
    spanning = spec(parallel={"strategy": "ddp", "host": "b", "nnodes": 2})
    assert refused_fields(spanning, two_gpus) == ["parallel.host", "parallel.nnodes", "parallel.host"]
    assert resolve_plan(spec(parallel={"gpus": [1]}), two_gpus).gpus == [1]
    assert resolve_plan(spec(parallel={"gpus": [7]}), Inventory()).gpus == [7]  # no host registered yet


def test_what_the_planner_the_stages_and_the_docs_know_of_a_model_is_its_arch_info(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mlp = ARCHS[Arch.MLP]
    changed = replace(
        mlp,
        kwargs={**mlp.kwargs, "width": Kwarg(int, 1, 8, default=4)},
        split_candidates=("4",),
        params=about(1e12),
    )
    monkeypatch.setitem(ARCHS, Arch.MLP, changed)
    assert resolve_plan(spec(model={"arch": "mlp", "kwargs": {"width": 8}})).strategy is Strategy.SINGLE
    assert refused_fields(spec(model={"arch": "mlp", "kwargs": {"width": 9}})) == ["model.kwargs.width"]
    names = changed.module_names({})
    assert default_split_at("mlp", names, 2) == ["4"]
    pipeline = spec(
        train={"max_steps": 5, "batch_size": 48}, parallel={"strategy": "pipeline", "nproc_per_node": 3}
    )
    assert refused_fields(pipeline) == ["parallel.strategy"]
    too_big = resolve_plan(spec(parallel={"nproc_per_node": 2}))
    assert too_big.strategy is Strategy.FSDP and "1000000M parameters" in too_big.strategy_reason
    assert "`width` (int, 1..8, default 4)" in render()


@pytest.mark.parametrize("written", ["O1", "o2", "fp16"])
def test_fp16_on_the_cpu_is_refused_quoting_the_precision_as_written(written: str) -> None:
    with pytest.raises(SpecError) as refused:
        resolve_plan(JobSpec.model_validate(job_body(precision=written)))
    (problem,) = refused.value.problems
    assert problem.field == "precision"
    assert f"precision {written!r}" in problem.message


def test_bf16_on_the_cpu_plans_with_a_warning_and_fp32_without() -> None:
    (warning,) = resolve_plan(JobSpec.model_validate(job_body(precision="O3"))).warnings
    assert "precision 'O3' on the CPU" in warning and "use fp32" in warning
    assert resolve_plan(JobSpec.model_validate(job_body(precision="fp32"))).warnings == []
    on_a_gpu = job_body(precision="bf16", parallel={"gpus": [0]})
    assert resolve_plan(JobSpec.model_validate(on_a_gpu)).warnings == []

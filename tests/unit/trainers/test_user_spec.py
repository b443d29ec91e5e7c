"""Specs naming user code: the spec checks each field's shape (an entry point is 'module:function', a
factory's kwargs are any JSON), the planner how they fit (a bundle to take them from, strategies and data
that run them), and the API answers both with a 422 naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from jobspec.plan import resolve_plan
from jobspec.problems import SpecError
from jobspec.spec import JobSpec, Strategy
from tests.unit.conftest import assert_problem, job_body

ROOT = Path(__file__).resolve().parents[3]
CODE = "sha256:" + "ab" * 32
FACTORY = {"factory": "models:build", "kwargs": {"layers": [64, 64], "norm": {"kind": "layer"}}}
DATA = {"factory": "data:build", "kwargs": {"split": "train"}}


def user(**sections: Any) -> dict[str, Any]:
    """A spec of a model factory, a data factory and a bundle; keyword arguments replace whole sections."""
    return job_body(**{"code": CODE, "model": FACTORY, "data": DATA, **sections})


def invalid(body: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as error:
        JobSpec.model_validate(body)
    return [(e["loc"], e["msg"]) for e in error.value.errors()]


def refused(body: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as error:
        resolve_plan(JobSpec.model_validate(body))
    return {problem.field: str(problem) for problem in error.value.problems}


def test_a_factory_takes_any_json_and_a_built_in_arch_numbers_only() -> None:
    spec = JobSpec.model_validate(user())
    assert spec.model.kwargs == FACTORY["kwargs"] and spec.data.kwargs == DATA["kwargs"]
    assert JobSpec.model_validate(spec.model_dump(mode="json")) == spec, "a stored spec validates again"
    [(loc, message)] = invalid(job_body(model={"arch": "mlp", "kwargs": {"hidden": [64]}}))
    assert loc == ("model", "kwargs", "hidden") and "must be a JSON number, got [64]" in message


@pytest.mark.parametrize(
    ("section", "fragment"),
    [
        ({"model": {"arch": "mlp", "factory": "models:build"}}, "model.arch and model.factory exclude each"),
        ({"model": {"kwargs": {}}}, "give model.arch (a built-in architecture) or model.factory"),
        ({"data": {"dataset": "digits", "factory": "data:build"}}, "data.dataset and data.factory exclude"),
        ({"data": {"dataset": "digits", "kwargs": {"n": 1}}}, "data.kwargs are passed to data.factory"),
        ({"data": {"factory": "data:build", "kwargs": {"root": "/etc"}}}, "data.kwargs.root: set data.root"),
    ],
)
def test_a_section_names_a_built_in_or_a_factory(section: dict[str, Any], fragment: str) -> None:
    [(loc, message)] = invalid(job_body(**section))
    assert loc == (next(iter(section)),) and fragment in message


@pytest.mark.parametrize(
    "entry", ["models", "models.build", "models:", ":build", "models:build:x", "my-mod:f"]
)
def test_an_entry_point_is_module_colon_function(entry: str) -> None:
    [(loc, message)] = invalid(job_body(model={"factory": entry}))
    assert loc == ("model", "factory") and "is not 'module:function'" in message
    [(loc, message)] = invalid(job_body(train={"loss": entry}))
    assert loc == ("train", "loss") and "choose cross_entropy, mse, or name a function" in message


def test_losses_are_built_in_or_an_entry_point() -> None:
    for loss, function in [("cross_entropy", None), ("mse", None), ("pkg.losses:focal", "pkg.losses:focal")]:
        assert JobSpec.model_validate(user(train={"loss": loss})).train.loss_function == function


def test_user_code_needs_a_bundle() -> None:
    body = user()
    del body["code"]
    problems = refused(body)
    assert list(problems) == ["code"]
    assert problems["code"].startswith("model.factory, data.factory name code of a bundle")
    assert "trainyard code push DIR" in problems["code"]


def test_a_factory_trains_with_ddp_when_several_processes_run() -> None:
    plan = resolve_plan(JobSpec.model_validate(user(parallel={"nproc_per_node": 2})))
    assert plan.strategy is Strategy.DDP and "model.factory" in plan.strategy_reason
    split = user(parallel={"strategy": "pipeline", "nproc_per_node": 2, "split_at": ["anything"]})
    assert resolve_plan(JobSpec.model_validate(split)).stages == 2, "its module names are checked in the job"


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        (user(parallel={"strategy": "hogwild"}), "model.factory", "hogwild does not run user code"),
        (
            job_body(code=CODE, train={"loss": "models:loss"}, parallel={"strategy": "hogwild"}),
            "train.loss",
            "hogwild does not run user code (train.loss)",
        ),
        (
            user(train={"loss": "models:loss"}, parallel={"strategy": "pipeline", "nproc_per_node": 2}),
            "train.loss",
            "use train.loss cross_entropy or mse",
        ),
        (job_body(code=CODE, data=DATA), "data.factory", "model.arch mlp is shaped by a built-in dataset"),
        (user(data={**DATA, "num_samples": 100}), "data.num_samples", "describes the built-in datasets"),
        (job_body(train={"loss": "mse"}), "train.loss", "data.dataset synthetic holds class labels"),
        (user(parallel={"wrap": ["Block"]}), "parallel.wrap", "drop it, use strategy fsdp"),
    ],
)
def test_user_code_that_cannot_run_as_asked_is_refused_with_the_fix(
    body: dict[str, Any], field: str, fragment: str
) -> None:
    problems = refused(body)
    assert field in problems and fragment in problems[field], problems


def test_wrap_is_for_fsdp_or_activation_checkpointing() -> None:
    resolve_plan(
        JobSpec.model_validate(user(parallel={"strategy": "fsdp", "nproc_per_node": 2, "wrap": ["B"]}))
    )
    checkpointed = user(parallel={"wrap": ["Block"]}, performance={"activation_checkpointing": True})
    resolve_plan(JobSpec.model_validate(checkpointed))


def test_the_api_names_the_field_to_fix(client: TestClient) -> None:
    assert_problem(client.post("/v1/jobs", json={**user(), "code": None}), "code", "trainyard code push")
    both = job_body(model={"arch": "mlp", "factory": "models:build"})
    assert_problem(
        client.post("/v1/jobs", json=both), "model", "model.arch and model.factory exclude each other"
    )


def test_the_byom_example_plans_once_its_code_is_pushed() -> None:
    spec = json.loads((ROOT / "examples" / "byom" / "spec.json").read_text())
    assert spec["code"] == "<from trainyard code push>"
    assert [loc for loc, _ in invalid(spec)] == [("code",)], "the placeholder is no bundle id"
    plan = resolve_plan(JobSpec.model_validate({**spec, "code": CODE}))
    assert plan.strategy is Strategy.DDP and plan.world_size == 2

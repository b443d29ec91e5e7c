"""JSON types are taken as sent: a string is never read as a number or a boolean, nor a number as a boolean.
Enum values stay plain strings, so a spec stored by the API still validates in the worker and the trainer."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.config import Settings
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import DevicePlacement, JobSpec, Optimizer, Precision, Schedule, Strategy
from tests.unit.conftest import assert_nothing_stored, assert_problem, job_body

MISTYPED: list[tuple[str, dict[str, Any], str, str]] = [
    ("int as a string", job_body(train={"max_steps": "5"}), "train.max_steps", "valid integer"),
    ("int as a fraction", job_body(train={"batch_size": 8.0}), "train.batch_size", "valid integer"),
    ("int as a boolean", job_body(train={"max_steps": True}), "train.max_steps", "valid integer"),
    ("float as a string", job_body(train={"lr": "0.1"}), "train.lr", "valid number"),
    ("float as a boolean", job_body(train={"momentum": False}), "train.momentum", "valid number"),
    ("bool as a number", job_body(metrics={"tensorboard": 1}), "metrics.tensorboard", "valid boolean"),
    ("bool as a string", job_body(performance={"compile": "false"}), "performance.compile", "valid boolean"),
    ("priority as a string", job_body(priority="7"), "priority", "valid integer"),
    ("GPU id as a string", job_body(parallel={"gpus": ["0"]}), "parallel.gpus.0", "valid integer"),
    (
        "model kwarg as a string",
        job_body(model={"arch": "mlp", "kwargs": {"hidden": "64"}}),
        "model.kwargs.hidden",
        'must be a JSON number, got "64"',
    ),
    (
        "model kwarg as a boolean",
        job_body(model={"arch": "alexnet", "kwargs": {"dropout": True}}),
        "model.kwargs.dropout",
        "must be a JSON number, got true",
    ),
    ("name as a number", job_body(name=5), "name", "valid string"),
]


@pytest.mark.parametrize(
    ("body", "field", "fragment"), [case[1:] for case in MISTYPED], ids=[case[0] for case in MISTYPED]
)
def test_wrong_json_type_is_refused_naming_the_field_and_type(
    client: TestClient, session: Session, settings: Settings, body: dict[str, Any], field: str, fragment: str
) -> None:
    assert_problem(client.post("/v1/jobs", json=body), field, fragment)
    assert_nothing_stored(session, settings)


def test_int_where_a_float_is_due_and_enum_strings_are_accepted(client: TestClient) -> None:
    body = job_body(
        train={"max_steps": 5, "batch_size": 8, "lr": 1, "momentum": 0, "optimizer": "adamw"},
        parallel={"strategy": "single"},
        precision="O3",  # an apex alias, read before the enum
    )
    response = client.post("/v1/jobs", json=body, params={"dry_run": True})
    assert response.status_code == 200, response.text
    assert response.json()["plan"]["precision"] == "bf16"


def every_enum_spec() -> JobSpec:
    """Every enum away from its default, plus a list and a dict of enums: the values a stored spec holds."""
    return JobSpec.model_validate(
        {
            "model": {"arch": "mlp", "kwargs": {"hidden": 32}},
            "data": {"dataset": "synthetic", "num_samples": 64, "placement": "cpu"},
            "train": {
                "max_steps": 5,
                "batch_size": 8,
                "lr": 1,
                "optimizer": "adam",
                "schedule": "cosine",
                "lr_scaling": "sqrt",
            },
            "parallel": {"strategy": "single", "gpus": [1], "placement": {"0": "cpu"}},
            "precision": "bf16",
        }
    )


def test_a_stored_spec_validates_again_as_the_worker_reads_it() -> None:
    spec = every_enum_spec()
    assert spec.train.optimizer is Optimizer.ADAM and spec.train.schedule is Schedule.COSINE
    assert spec.parallel.placement == {"0": DevicePlacement.CPU} and spec.train.lr == 1.0
    stored = spec.model_dump(mode="json")  # what the jobs table holds
    assert JobSpec.model_validate(stored) == spec


def test_the_run_config_file_validates_again_as_the_trainer_reads_it() -> None:
    spec = every_enum_spec()
    config = RunConfig(job_id=1, attempt=1, spec=spec, plan=resolve_plan(spec))
    again = RunConfig.model_validate_json(config.model_dump_json())
    assert again == config
    assert again.plan.strategy is Strategy.SINGLE and again.spec.precision is Precision.BF16

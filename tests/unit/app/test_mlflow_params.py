"""What an MLflow run shows of a job, without a server: the spec as dotted params within MLflow's limits,
keys MLflow takes, the status each end maps to, and the 422 of a server that exports no runs."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

import app.services.integrations.mlflow_runs  # noqa: F401  before MLflow loads: its settings (no telemetry) go first
from app.services.errors import InvalidSpec
from app.services.integrations.mlflow_exporter import check_tracking
from app.services.integrations.mlflow_params import (
    MAX_KEY,
    MAX_PARAM_VALUE,
    RUN_STATUS,
    TRUNCATED,
    mlflow_key,
    spec_params,
)
from core.config import Settings
from core.states import TERMINAL
from jobspec.spec import JobSpec
from tests.unit.conftest import assert_problem, job_body

PROGRAM_SPEC: dict[str, Any] = {
    "name": "script",
    "code": "sha256:" + "0" * 64,
    "program": {
        "entrypoint": ["python", "train.py"],
        "hyperparameters": {
            "lr": 0.001,
            "layers": [64, 64],
            "optim": {"name": "adamw", "betas": [0.9, 0.95]},
            "notes": "x" * 7000,
            "a@b": 1,
            "a#b": 2,
        },
    },
    "train": {"max_steps": 10},
    "tracking": {"mlflow": {"experiment": "e"}},
}


def takes(key: str) -> bool:
    """Whether MLflow's own checks accept `key` as a param or metric name."""
    from mlflow.utils.validation import path_not_unique, validate_param_and_metric_name

    return bool(validate_param_and_metric_name(key)) and not path_not_unique(key) and len(key) <= MAX_KEY


def test_the_spec_becomes_dotted_params_with_its_defaults_and_hyperparameters() -> None:
    params = spec_params(PROGRAM_SPEC)
    assert params["name"] == "script"
    assert params["program.entrypoint"] == '["python", "train.py"]'
    assert params["program.hyperparameters.lr"] == "0.001"
    assert params["program.hyperparameters.layers"] == "[64, 64]"
    assert params["program.hyperparameters.optim.name"] == "adamw"
    assert params["program.hyperparameters.optim.betas"] == "[0.9, 0.95]"
    assert params["train.max_steps"] == "10"
    assert params["checkpoint.keep_last"] == "3"  # a default: runs compare field by field
    assert params["performance.compile"] == "false"
    assert not any(key.startswith("tracking") for key in params)
    assert "parallel.gpus" not in params  # unset
    assert all(takes(key) for key in params)


def test_a_long_value_is_cut_to_mlflows_limit_and_marked() -> None:
    notes = spec_params(PROGRAM_SPEC)["program.hyperparameters.notes"]
    assert len(notes) == MAX_PARAM_VALUE and notes.endswith(TRUNCATED)


def test_keys_mlflow_refuses_are_made_valid_and_stay_apart() -> None:
    params = spec_params(PROGRAM_SPEC)
    odd = [key for key in params if key.startswith("program.hyperparameters.a_b-")]
    assert len(odd) == 2 and {params[key] for key in odd} == {"1", "2"}
    for name in ("loss", "eval_accuracy", "gpu0/util", "samples_per_s"):
        assert mlflow_key(name) == name
    for name in ("a//b", "/a", "../a", "a/", "eval:acc", "x" * 300, "top-1 (%)", "[0]=1+2"):
        key = mlflow_key(name)
        assert takes(key), key
        assert mlflow_key(name) == key != name
    assert mlflow_key("a@b") != mlflow_key("a#b")


def test_every_end_of_a_job_has_a_run_status() -> None:
    assert set(RUN_STATUS) == TERMINAL
    assert set(RUN_STATUS.values()) <= {"FINISHED", "FAILED", "KILLED"}


def test_a_spec_asking_for_mlflow_on_a_server_without_it_is_refused_naming_the_field_and_setting() -> None:
    spec = JobSpec.model_validate(PROGRAM_SPEC)
    with pytest.raises(InvalidSpec) as refused:
        check_tracking(Settings(mlflow_uri=None), spec)
    (problem,) = refused.value.problems
    assert problem.field == "tracking.mlflow" and "TRAINYARD_MLFLOW_URI" in problem.message
    check_tracking(Settings(mlflow_uri="http://127.0.0.1:5000"), spec)
    check_tracking(Settings(mlflow_uri=None), JobSpec.model_validate({**PROGRAM_SPEC, "tracking": {}}))


def test_a_spec_asking_for_mlflow_is_refused_by_a_server_without_it(client: TestClient) -> None:
    for dry_run in ("false", "true"):
        refused = client.post(f"/v1/jobs?dry_run={dry_run}", json=job_body(tracking={"mlflow": {}}))
        assert_problem(refused, "tracking.mlflow", "TRAINYARD_MLFLOW_URI")

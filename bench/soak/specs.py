"""What the soak's users submit: small CPU jobs of every kind (a built-in on one process, the digits example
under ddp on 2 gloo ranks, the tests' paced bundle as factories and as a script) and a sweep whose trials
report every step. Each takes seconds on the 2-core box; each may restart, as a rank killed asks it to."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from tests.integration.jobs import PACED, example_spec
from tests.integration.test_user_code_lifecycle import factories, program
from tests.unit.code_archives import bundle_archive

LIMITS = {"max_restarts": 3}
PACE_S = 0.05  # a paced step's sleep: its 60 steps take 3 s, asleep rather than on a core
MLFLOW_EXPERIMENT = "soak"


class Kind(StrEnum):
    BUILTIN = "builtin"
    DDP = "ddp"
    BUNDLE = "bundle"
    SCRIPT = "script"


def builtin(name: str, steps: int, tracked: bool) -> dict[str, Any]:
    """A small MLP on synthetic data in one process; `tracked`: exported to MLflow."""
    spec: dict[str, Any] = {
        "name": name,
        "model": {"arch": "mlp"},
        "data": {"dataset": "synthetic", "num_samples": 256},
        "train": {"max_steps": steps, "batch_size": 16},
        "parallel": {"strategy": "single"},
        "checkpoint": {"every_n_epochs": 0, "every_n_steps": 20, "keep_last": 2},
        "metrics": {"every_n_steps": 5},
        "limits": LIMITS,
    }
    if tracked:
        spec["tracking"] = {"mlflow": {"experiment": MLFLOW_EXPERIMENT}}
    return spec


def job_spec(kind: Kind, code: str, tracked: bool) -> dict[str, Any]:
    if kind is Kind.BUILTIN:
        return builtin("soak-builtin", 40, tracked)
    if kind is Kind.DDP:
        return example_spec("digits_ddp_cpu.json", train={"epochs": 2}, limits=LIMITS)
    made = factories(code, PACE_S) if kind is Kind.BUNDLE else program(code, PACE_S)
    return {**made, "name": f"soak-{kind}", "limits": LIMITS}


def sweep(seed: int) -> dict[str, Any]:
    """Four trials, two at a time, reporting their loss every step; the median pruner judges each report."""
    trial = {**builtin("soak-trial", 30, tracked=False), "metrics": {"every_n_steps": 1}}
    return {
        "name": "soak-sweep",
        "spec": trial,
        "parameters": {"train.lr": {"type": "float", "low": 0.001, "high": 0.3, "log": True}},
        "objective": {"metric": "loss", "goal": "minimize"},
        "max_trials": 4,
        "parallel": 2,
        "sampler": "random",
        "pruner": "median",
        "pruner_options": {"n_startup_trials": 1},
        "seed": seed,
    }


def paced_bundle() -> bytes:
    """The tests' paced bundle as the .tar.gz a user pushes to /v1/code."""
    return bundle_archive({path.name: path.read_text() for path in sorted(PACED.glob("*.py"))})

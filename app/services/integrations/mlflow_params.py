"""What an MLflow run shows of a job: its spec as params, its metric names as MLflow keys, its tags and the
status it ends with. Pure functions of the job's rows; app/services/integrations/mlflow_runs.py sends them."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Iterator
from typing import Any

from app.services.stored_spec import expanded
from core.models import Job
from core.states import JobStatus

MAX_PARAM_VALUE = 6000  # characters: MLflow's limit on a param's value; a longer one is cut and marked
MAX_KEY = 250  # characters of a param, metric or tag key
TRUNCATED = "...[truncated]"
# What MLflow takes in a key (its names may become file paths): a character outside these, or a path that
# normalises to another (a//b, /a, ../a), is refused, and the whole batch with it.
_KEY = re.compile(r"[\w.\- /]+")
_KEY_DIGEST_CHARS = 8

RUN_STATUS: dict[JobStatus, str] = {
    JobStatus.SUCCEEDED: "FINISHED",
    JobStatus.FAILED: "FAILED",
    JobStatus.TIMED_OUT: "FAILED",
    JobStatus.CANCELLED: "KILLED",
    JobStatus.PRUNED: "KILLED",  # stopped early by its sweep's pruner: ended from outside, as a cancel is
}


def mlflow_key(name: str) -> str:
    """`name` where MLflow takes it as a key; else with each refused character as '_' and a digest of the
    name added, so two names never become one key."""
    if (
        len(name) <= MAX_KEY
        and _KEY.fullmatch(name)
        and posixpath.normpath(name) == name
        and not name.startswith(("/", ".."))
    ):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_KEY_DIGEST_CHARS]
    cleaned = re.sub(r"[^\w.\- ]", "_", name).lstrip(".")
    return f"{cleaned[: MAX_KEY - _KEY_DIGEST_CHARS - 1]}-{digest}"


def _flatten(values: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        if isinstance(value, dict) and value:
            yield from _flatten(value, f"{prefix}{key}.")
        elif value is not None and value != {}:
            yield f"{prefix}{key}", value


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) <= MAX_PARAM_VALUE:
        return text
    return text[: MAX_PARAM_VALUE - len(TRUNCATED)] + TRUNCATED


def spec_params(stored_spec: dict[str, Any]) -> dict[str, str]:
    """Every field of the spec that ran, defaults included (so runs compare field by field), as dotted keys:
    `train.lr`, `program.hyperparameters.<key>`. Lists are JSON; unset fields are left out, and so is
    `tracking`, which says where the job is recorded, not how it trains."""
    spec = {key: value for key, value in expanded(stored_spec).items() if key != "tracking"}
    params: dict[str, str] = {}
    for name, value in _flatten(spec, ""):
        params.setdefault(mlflow_key(name), _param_value(value))
    return params


def run_tags(job: Job, token: str, public_url: str | None) -> dict[str, str]:
    """Who ran the job and how, and where to find it in Trainyard; `token` finds the run again."""
    tags = {
        "trainyard.job_id": str(job.id),
        "trainyard.owner": job.owner,
        "trainyard.strategy": str(job.plan.get("strategy", "")),
        "trainyard.export_id": token,
        "mlflow.user": job.owner,
    }
    if public_url:
        tags["trainyard.url"] = f"{public_url.rstrip('/')}/#/jobs/{job.id}"
    if job.sweep_id is not None:
        tags["trainyard.sweep_id"] = str(job.sweep_id)
        tags["trainyard.trial"] = str(job.trial)
    return tags

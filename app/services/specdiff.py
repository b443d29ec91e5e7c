"""How jobs differ in what they ran, in a few words ("lr 0.1 vs 0.05, strategy ddp vs single"): the one place
the dashboard's Compare page and `trainyard compare --diff` both take it from, through GET /v1/compare."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from sqlalchemy.orm import Session

from app.schemas import ComparedJob, SpecDiff, SpecDifference
from app.services.jobs import get_owned_job
from app.services.keys import Caller
from app.services.stored_spec import expanded
from core.models import Job

# What the planner resolved stands for what the spec asked: "auto" and "ddp" that both ran ddp are alike.
PLANNED = ("strategy", "world_size", "device", "precision")
# Left out: the spec fields the plan resolves, and those that say nothing about the run itself.
SKIPPED = {"parallel.strategy", "precision", "name", "priority"}
# Fields under these go by their own name (lr, strategy, depth, a program's hyperparameters); others by their
# path (profile.steps).
NAMED_UNDER = ("plan.", "train.", "model.kwargs.", "data.kwargs.", "program.hyperparameters.")
SHORT = 6  # differences named in the summary and in each job's line; the list holds them all
UNSET = "-"


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves; a list is one value, an empty object none."""
    if not isinstance(value, dict):
        return {prefix: value}
    leaves: dict[str, Any] = {}
    for key, item in value.items():
        leaves.update(_flatten(item, f"{prefix}.{key}" if prefix else key))
    return leaves


def run_record(job: Job) -> dict[str, Any]:
    """The plan's choices, then the spec as stored (defaults filled in), flattened."""
    planned = {f"plan.{key}": job.plan.get(key) for key in PLANNED}
    return planned | {path: v for path, v in _flatten(expanded(job.spec)).items() if path not in SKIPPED}


def shown(value: Any) -> str:
    if value is None:
        return UNSET
    return value if isinstance(value, str) else json.dumps(value)


def _labels(fields: list[str]) -> dict[str, str]:
    """Short names, unless two differing fields would share one (model.kwargs.depth, data.kwargs.depth)."""
    short = {f: next((f.removeprefix(p) for p in NAMED_UNDER if f.startswith(p)), f) for f in fields}
    shared = Counter(short.values())
    return {field: name if shared[name] == 1 else field for field, name in short.items()}


def _short(parts: list[str]) -> str:
    more = len(parts) - SHORT
    return ", ".join(parts[:SHORT]) + (f", and {more} more" if more > 0 else "")


def diff_jobs(jobs: list[Job]) -> SpecDiff:
    records = [run_record(job) for job in jobs]
    fields = list(dict.fromkeys(path for record in records for path in record))
    values = {path: [shown(record.get(path)) for record in records] for path in fields}
    differing = [path for path in fields if len(set(values[path])) > 1]
    labels = _labels(differing)
    differences = [SpecDifference(field=p, label=labels[p], values=values[p]) for p in differing]
    compared = [
        ComparedJob(
            id=job.id, name=job.name, differs=_short([f"{d.label} {d.values[i]}" for d in differences])
        )
        for i, job in enumerate(jobs)
    ]
    summary = _short([f"{d.label} {' vs '.join(d.values)}" for d in differences])
    return SpecDiff(jobs=compared, differences=differences, summary=summary or "the specs and plans agree")


def compare_jobs(session: Session, job_ids: list[int], caller: Caller) -> SpecDiff:
    """Another user's job is reported missing, as everywhere."""
    return diff_jobs([get_owned_job(session, job_id, caller) for job_id in job_ids])

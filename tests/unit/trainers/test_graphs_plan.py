"""performance.cuda_graphs at plan time: `on` is refused, naming why and the fix, where the whole step cannot
be captured; `auto` plans and says in the plan's warnings that the job trains without graphs."""

from __future__ import annotations

from typing import Any

import pytest

from jobspec.plan import resolve_plan
from jobspec.problems import SpecError
from jobspec.spec import CudaGraphs, JobSpec
from tests.unit.conftest import job_body

ONE_GPU = {"num_gpus": 1}

CANNOT: list[tuple[str, dict[str, Any], str]] = [
    ("on the CPU", {}, "CUDA graphs need a GPU"),
    (
        "under fsdp",
        {"parallel": {"num_gpus": 2, "strategy": "fsdp"}},
        "only strategies single and ddp are captured, not fsdp",
    ),
    ("in fp16", {"parallel": ONE_GPU, "precision": "fp16"}, "use bf16"),
    (
        "skipping non-finite steps",
        {"parallel": ONE_GPU, "train": {"max_steps": 5, "batch_size": 8, "on_nonfinite": "skip_step"}},
        "skip_step decides on the host",
    ),
    (
        "recomputing activations",
        {"parallel": ONE_GPU, "performance": {"activation_checkpointing": True}},
        "RNG state on the host",
    ),
]


def spec(graphs: str, sections: dict[str, Any]) -> JobSpec:
    performance = {**sections.get("performance", {}), "cuda_graphs": graphs}
    return JobSpec.model_validate(job_body(**{**sections, "performance": performance}))


@pytest.mark.parametrize(("sections", "why"), [c[1:] for c in CANNOT], ids=[c[0] for c in CANNOT])
def test_on_is_refused_where_the_step_cannot_be_captured(sections: dict[str, Any], why: str) -> None:
    with pytest.raises(SpecError) as refused:
        resolve_plan(spec("on", sections))
    problems = [p for p in refused.value.problems if p.field == "performance.cuda_graphs"]
    assert len(problems) == 1 and why in problems[0].message + problems[0].fix, refused.value.problems
    assert "set performance.cuda_graphs to off or auto" in problems[0].fix


@pytest.mark.parametrize(("sections", "why"), [c[1:] for c in CANNOT], ids=[c[0] for c in CANNOT])
def test_auto_plans_and_says_the_job_trains_without_graphs(sections: dict[str, Any], why: str) -> None:
    warnings = resolve_plan(spec("auto", sections)).warnings
    said = [w for w in warnings if w.startswith("performance.cuda_graphs=auto")]
    assert len(said) == 1 and why in said[0], warnings


@pytest.mark.parametrize(
    ("parallel", "strategy"), [(ONE_GPU, "single"), ({"num_gpus": 2, "strategy": "ddp"}, "ddp")]
)
def test_on_plans_for_single_and_ddp(parallel: dict[str, Any], strategy: str) -> None:
    plan = resolve_plan(spec("on", {"parallel": parallel}))
    assert plan.strategy == strategy and not plan.warnings


def test_true_and_false_read_as_on_and_off() -> None:
    assert (
        JobSpec.model_validate(job_body(performance={"cuda_graphs": True})).performance.cuda_graphs
        is CudaGraphs.ON
    )
    assert JobSpec.model_validate(job_body()).performance.cuda_graphs is CudaGraphs.OFF

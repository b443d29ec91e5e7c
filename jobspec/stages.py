"""Where a model splits into consecutive stages for model_parallel and pipeline.

A stage is a run of the model's stage units (its top-level modules in forward order, a ModuleList's items
each on their own: trainers/placement.py); `parallel.split_at` names the units where a new stage begins.
Where a default split may cut is each model's ArchInfo.split_points. No torch import: the planner checks
split points at submit time.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobspec.catalog.archs import arch_info
from jobspec.problems import Problem, SpecError, refuse
from jobspec.spec import ParallelSpec, Strategy

# torchvision classifiers (resnet, alexnet, vgg) flatten their pooled features in forward(), between the
# module of this name and the next; a pipeline stage, which runs its modules one after another, must too.
FLATTEN_AFTER = "avgpool"


def spread_over_devices(parallel: ParallelSpec, strategy: Strategy) -> bool:
    """Whether the model's units may land on different devices: stages, or modules placed by name."""
    return strategy in (Strategy.MODEL_PARALLEL, Strategy.PIPELINE) or bool(parallel.placement)


def default_split_at(arch: str | None, names: Sequence[str], stages: int) -> list[str]:
    """stages - 1 candidates spread evenly; i*n/k for i < k has distinct floors whenever n >= k - 1. A
    factory's model (arch None) may start a stage at any unit but its first."""
    candidates = tuple(names[1:]) if arch is None else arch_info(arch).split_points(names)
    if stages - 1 > len(candidates):
        model = "model.factory's model" if arch is None else f"model.arch {arch}"
        raise refuse(
            "parallel.strategy",
            f"{model} splits into at most {len(candidates) + 1} stages by default (its top-level modules: "
            f"{', '.join(names)})",
            "ask for fewer GPUs/processes or give parallel.split_at",
        )
    return [candidates[i * len(candidates) // stages] for i in range(1, stages)]


def split_at_problem(names: Sequence[str], split_at: Sequence[str]) -> Problem | None:
    """Why these split points cannot cut the model, or None when they can."""
    if not split_at:
        return None
    field = "parallel.split_at"
    unknown = [name for name in split_at if name not in names]
    if unknown:
        return Problem(
            field,
            f"parallel.split_at names {unknown[0]!r}, which the model does not have",
            f"use some of {', '.join(names[1:])}",
        )
    positions = [names.index(name) for name in split_at]
    if positions[0] == 0:
        return Problem(
            field,
            f"parallel.split_at names {names[0]!r}, the first module: the first stage would be empty",
            "start later",
        )
    if positions != sorted(set(positions)):
        return Problem(
            field,
            "parallel.split_at must list distinct modules in the model's order",
            f"order them as the model does: {', '.join(names)}",
        )
    return None


def stage_groups(names: Sequence[str], split_at: Sequence[str]) -> list[list[str]]:
    """The top-level module names of each stage, in order."""
    problem = split_at_problem(names, split_at)
    if problem is not None:
        raise SpecError([problem])
    groups: list[list[str]] = [[]]
    for name in names:
        if name in split_at:
            groups.append([])
        groups[-1].append(name)
    return groups

"""Where a model splits into consecutive stages for model_parallel and pipeline.

A stage is a run of the model's top-level modules (as `named_children()` lists them, which is their forward
order for every model in the registry); `parallel.split_at` names the modules where a new stage begins. No
torch import: the API checks split points at submit time.
"""

from __future__ import annotations

from collections.abc import Sequence

# Modules a default split may start a stage at, in order. Torchvision models list stems and pools that make
# poor stage boundaries; the small Sequential models (and embedding_bag) may split before any module but the
# first, so they have no entry. Two stages take the middle candidate: resnets after layer2, alexnet and vgg
# between their convolutional features and the classifier.
SPLIT_CANDIDATES: dict[str, tuple[str, ...]] = {
    "resnet18": ("layer1", "layer2", "layer3", "layer4", "avgpool"),
    "resnet50": ("layer1", "layer2", "layer3", "layer4", "avgpool"),
    "alexnet": ("avgpool", "classifier"),
    "vgg11": ("avgpool", "classifier"),
}

# torchvision classifiers (resnet, alexnet, vgg) flatten their pooled features in forward(), between the
# module of this name and the next; a pipeline stage, which runs its modules one after another, must too.
FLATTEN_AFTER = "avgpool"


def split_candidates(arch: str, names: Sequence[str]) -> tuple[str, ...]:
    return SPLIT_CANDIDATES.get(arch, tuple(names[1:]))


def max_stages(arch: str, names: Sequence[str]) -> int:
    """How many stages the default split points can give."""
    return len(split_candidates(arch, names)) + 1


def default_split_at(arch: str, names: Sequence[str], stages: int) -> list[str]:
    """stages - 1 candidates spread evenly; i*n/k for i < k has distinct floors whenever n >= k - 1."""
    candidates = split_candidates(arch, names)
    if stages - 1 > len(candidates):
        raise ValueError(
            f"model.arch {arch} splits into at most {len(candidates) + 1} stages by default; "
            "ask for fewer GPUs/processes or give parallel.split_at"
        )
    return [candidates[i * len(candidates) // stages] for i in range(1, stages)]


def split_at_problem(names: Sequence[str], split_at: Sequence[str]) -> str | None:
    """Why these split points cannot cut the model, or None when they can."""
    if not split_at:
        return None
    unknown = [name for name in split_at if name not in names]
    if unknown:
        return f"names {unknown[0]!r}, which the model does not have; use some of {', '.join(names[1:])}"
    positions = [names.index(name) for name in split_at]
    if positions[0] == 0:
        return f"names {names[0]!r}, the first module: the first stage would be empty; start later"
    if positions != sorted(set(positions)):
        return f"must list distinct modules in the model's order ({', '.join(names)})"
    return None


def stage_groups(names: Sequence[str], split_at: Sequence[str]) -> list[list[str]]:
    """The top-level module names of each stage, in order."""
    problem = split_at_problem(names, split_at)
    if problem is not None:
        raise ValueError(f"parallel.split_at {problem}")
    groups: list[list[str]] = [[]]
    for name in names:
        if name in split_at:
            groups.append([])
        groups[-1].append(name)
    return groups

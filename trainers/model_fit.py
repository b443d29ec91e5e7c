"""Whether the spec fits its model and dataset, as the catalogue describes them: allowed kwargs, module names
for placement and split points, the kind of input, sparse tables, what there is to evaluate on. No torch.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainers.catalog.archs import ARCHS, ArchInfo, archs_of
from trainers.catalog.datasets import DATASETS, InputKind, datasets_of
from trainers.problems import Problem
from trainers.spec import JobSpec, Optimizer, Schedule, Strategy
from trainers.stages import split_at_problem


def _module_names(spec: JobSpec, info: ArchInfo) -> tuple[str, ...] | None:
    """The model's top-level modules; None while its kwargs are refused (mlp's depth sets their count)."""
    if info.kwarg_problems(spec.model.arch, spec.model.kwargs):
        return None
    return info.module_names(spec.model.kwargs)


def _modules(spec: JobSpec, names: tuple[str, ...]) -> Iterator[Problem]:
    for name in spec.parallel.placement or {}:
        if name not in names:
            yield Problem(
                "parallel.placement",
                f"parallel.placement names {name!r}, which {spec.model.arch} does not have",
                f"use {', '.join(names)}",
            )
    problem = split_at_problem(names, spec.parallel.split_at or [])
    if problem is not None:
        yield problem


def _reads_data(spec: JobSpec, info: ArchInfo) -> Iterator[Problem]:
    arch, dataset = spec.model.arch, spec.data.dataset
    holds = DATASETS[dataset].input
    if info.input is not holds:
        # Blame the side that reads something other than images: it is the one chosen on purpose.
        if info.input is not InputKind.IMAGES:
            yield Problem(
                "model.arch",
                f"model.arch {arch} takes {info.input.noun}, but data.dataset {dataset} holds {holds.noun}",
                f"use data.dataset {' or '.join(datasets_of(info.input))}, or a model of {holds.noun}",
            )
        else:
            yield Problem(
                "data.dataset",
                f"data.dataset {dataset} holds {holds.noun}, which {arch} cannot read",
                f"use model.arch {' or '.join(archs_of(holds))}, or a dataset of {info.input.noun}",
            )
    if info.input is not InputKind.IMAGES and spec.data.image_size is not None:
        yield Problem(
            "data.image_size", f"data.image_size sizes images, and {arch} reads {info.input.noun}", "drop it"
        )


def _sparse_table(spec: JobSpec, info: ArchInfo, strategy: Strategy) -> Iterator[Problem]:
    arch, optimizer = spec.model.arch, spec.train.optimizer
    if not info.sparse:
        return
    if strategy is Strategy.PIPELINE:
        yield Problem(
            "parallel.strategy",
            f"parallel.strategy=pipeline cannot split {arch} (its sparse table and dense head train with "
            "different optimizers)",
            "use strategy single with parallel.placement",
        )
    # fsdp trains the table with dense gradients (sparse ones have no sharded form): any optimizer fits.
    elif optimizer is not Optimizer.SGD and strategy is not Strategy.FSDP:
        yield Problem(
            "train.optimizer",
            f"train.optimizer={optimizer} cannot take the sparse gradients of {arch}'s embedding table "
            "(Adam keeps two dense moments, tripling the table's memory)",
            "use train.optimizer sgd, or parallel.strategy fsdp, which trains the table with dense gradients",
        )


def _data_options(spec: JobSpec) -> Iterator[Problem]:
    data, info = spec.data, DATASETS[spec.data.dataset]
    if info.on_disk and not data.root:
        yield Problem(
            "data.root",
            f"data.dataset {data.dataset} is read from disk, and data.root is not set",
            "set data.root to its directory under TRAINYARD_DATA_DIR (nothing is downloaded)",
        )
    if spec.train.schedule is Schedule.PLATEAU and data.val_fraction == 0 and not info.test_split:
        yield Problem(
            "data.val_fraction",
            f"data.val_fraction=0 holds nothing of {data.dataset} out to evaluate on, and "
            "train.schedule=plateau decays the lr only when eval_loss stops improving",
            "set data.val_fraction above 0 or choose another train.schedule",
        )


def model_problems(spec: JobSpec, strategy: Strategy) -> Iterator[Problem]:
    """Everything about the model and the data that does not fit the rest of the spec."""
    info = ARCHS[spec.model.arch]
    names = _module_names(spec, info)
    if names is None:
        yield from info.kwarg_problems(spec.model.arch, spec.model.kwargs)
    else:
        yield from _modules(spec, names)
    yield from _reads_data(spec, info)
    yield from _sparse_table(spec, info, strategy)
    yield from _data_options(spec)


def stage_problems(spec: JobSpec, strategy: Strategy, stages: int) -> Iterator[Problem]:
    """A default split must find a place for every stage the layout asks for."""
    info = ARCHS[spec.model.arch]
    names = _module_names(spec, info)
    if stages == 1 or spec.parallel.split_at or names is None:
        return
    most = info.max_stages(names)
    if stages > most:
        yield Problem(
            "parallel.strategy",
            f"parallel.strategy={strategy} needs {stages} stages but {spec.model.arch} splits into at most "
            f"{most} by default",
            "ask for fewer GPUs/processes or give parallel.split_at",
        )

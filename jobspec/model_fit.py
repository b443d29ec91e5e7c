"""Whether the spec fits its model and dataset, as the catalogue describes them: allowed kwargs, module names
for placement and split points, the kind of input, sparse tables, what there is to evaluate on. No torch.

A model or dataset from a factory has no catalogue entry: what it would tell (module names, kwargs, the kind
of input) is checked inside the job once the factory has run; what user code needs is jobspec/user_fit.py.
"""

from __future__ import annotations

from collections.abc import Iterator

from jobspec.catalog.archs import ARCHS, Arch, ArchInfo, archs_of
from jobspec.catalog.datasets import DATASETS, DatasetName, InputKind, datasets_of
from jobspec.hf_files import NO_PATH
from jobspec.problems import Problem
from jobspec.spec import JobSpec, ModelSpec, Optimizer, Schedule, Strategy
from jobspec.stages import split_at_problem, spread_over_devices


def _module_names(arch: Arch, spec: JobSpec, info: ArchInfo) -> tuple[str, ...] | None:
    """The model's top-level modules; None while its kwargs are refused (mlp's depth sets their count)."""
    if info.kwarg_problems(arch, spec.inputs.model.arch_kwargs):
        return None
    return info.module_names(spec.inputs.model.arch_kwargs)


def _modules(arch: Arch, spec: JobSpec, names: tuple[str, ...]) -> Iterator[Problem]:
    for name in spec.parallel.placement or {}:
        if name not in names:
            yield Problem(
                "parallel.placement",
                f"parallel.placement names {name!r}, which {arch} does not have",
                f"use {', '.join(names)}",
            )
    problem = split_at_problem(names, spec.parallel.split_at or [])
    if problem is not None:
        yield problem


def _reads_data(arch: Arch, dataset: DatasetName, spec: JobSpec, info: ArchInfo) -> Iterator[Problem]:
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
            readers = archs_of(holds)
            yield Problem(
                "data.dataset",
                f"data.dataset {dataset} holds {holds.noun}, which {arch} cannot read",
                f"use model.arch {' or '.join(readers)}, or a dataset of {info.input.noun}"
                if readers
                else f"bring a model of {holds.noun} (model.factory), or use a dataset of {info.input.noun}",
            )
    if info.input is not InputKind.IMAGES and spec.inputs.data.image_size is not None:
        yield Problem(
            "data.image_size", f"data.image_size sizes images, and {arch} reads {info.input.noun}", "drop it"
        )


def _sparse_table(arch: Arch, spec: JobSpec, info: ArchInfo, strategy: Strategy) -> Iterator[Problem]:
    optimizer = spec.train.optimizer
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


def _language_model(arch: Arch, spec: JobSpec, info: ArchInfo, strategy: Strategy) -> Iterator[Problem]:
    """A language model's shape against its data, and whether its embeddings may be tied where it runs."""
    model, data = spec.inputs
    if not info.language_model or info.kwarg_problems(arch, model.arch_kwargs):
        return  # kwargs out of range are refused on their own
    kwargs = info.complete(info.with_context(model.arch_kwargs, data.block_size))
    if "n_head" in kwargs and kwargs["n_embd"] % kwargs["n_head"]:
        yield Problem(
            "model.kwargs.n_embd",
            f"model.kwargs.n_embd={kwargs['n_embd']:g} does not split into n_head={kwargs['n_head']:g} heads",
            "use an n_embd that is a multiple of n_head, like 64 per head",
        )
    if data.block_size is not None and "block_size" in kwargs and data.block_size > kwargs["block_size"]:
        yield Problem(
            "model.kwargs.block_size",
            f"data.block_size={data.block_size} windows do not fit {arch}'s context of "
            f"model.kwargs.block_size={kwargs['block_size']:g} tokens",
            "raise model.kwargs.block_size to data.block_size, or leave it out (it defaults to that)",
        )
    tie_asked = model.arch_kwargs.get("tie_embeddings") == 1
    if info.tied and tie_asked and spread_over_devices(spec.parallel, strategy):
        yield Problem(
            "model.kwargs.tie_embeddings",
            f"model.kwargs.tie_embeddings=1 shares {arch}'s token embedding with its output head, which one "
            f"device must hold, and parallel.strategy={strategy} or parallel.placement spreads the model's "
            "modules over devices",
            f"set model.kwargs.tie_embeddings=0 (or leave it out) to split {arch} over stages, or use "
            "strategy fsdp to spread its memory over GPUs",
        )


def model_warnings(spec: JobSpec, strategy: Strategy) -> list[str]:
    """What a built-in model changes of itself to run as asked; the plan carries these to the dry run."""
    model = spec.model  # None in a program job
    if model is None or model.arch is None:
        return []
    if not ARCHS[model.arch].unties(model.arch_kwargs, spread_over_devices(spec.parallel, strategy)):
        return []
    return [
        f"model.arch {model.arch} spread over devices (parallel.strategy={strategy}, parallel.placement) "
        "unties its output head from its token embedding, as torchtitan does for pipelined language "
        "models: the head gets a vocab_size x n_embd weight of its own, GPT-2 initialised (as many "
        "parameters again as the embedding); set model.kwargs.tie_embeddings=0 to say so"
    ]


def _data_options(dataset: DatasetName, spec: JobSpec, strategy: Strategy) -> Iterator[Problem]:
    data, info = spec.inputs.data, DATASETS[dataset]
    if info.on_disk and not data.root:
        yield Problem(
            "data.root",
            f"data.dataset {dataset} is read from disk, and data.root is not set",
            "set data.root to its directory under TRAINYARD_DATA_DIR (nothing is downloaded)",
        )
    if info.input is InputKind.TOKENS and data.block_size is None:
        yield Problem(
            "data.block_size",
            f"data.dataset {dataset} is cut into windows of data.block_size tokens, and it is not set",
            "set data.block_size to the context your model takes, like 256",
        )
    if info.input is InputKind.TOKENS and strategy is Strategy.HOGWILD:
        yield Problem(
            "parallel.strategy",
            f"parallel.strategy=hogwild shares one resident dataset between its workers, and data.dataset "
            f"{dataset} is read from its files a window at a time",
            "use strategy ddp (it runs CPU processes too)",
        )
    if spec.train.schedule is Schedule.PLATEAU and data.val_fraction == 0 and not info.test_split:
        yield Problem(
            "data.val_fraction",
            f"data.val_fraction=0 holds nothing of {dataset} out to evaluate on, and "
            "train.schedule=plateau decays the lr only when eval_loss stops improving",
            "set data.val_fraction above 0 or choose another train.schedule",
        )


def _hf_options(model: ModelSpec) -> Iterator[Problem]:
    """model.path, config_only, lora and export belong to hf_causal_lm; it needs model.path."""
    if model.arch is Arch.HF_CAUSAL_LM:
        if model.path is None:
            yield NO_PATH
        return
    used = {"path": model.path is not None, "config_only": model.config_only, "lora": model.lora is not None}
    chosen = f"model.arch {model.arch}" if model.arch is not None else "model.factory"
    for name in (name for name, given in used.items() if given):
        yield Problem(
            f"model.{name}",
            f"model.{name} applies to model.arch hf_causal_lm, and the job uses {chosen}",
            f"drop model.{name}, or use model.arch hf_causal_lm",
        )


def model_problems(spec: JobSpec, strategy: Strategy) -> Iterator[Problem]:
    """Everything about a built-in model and dataset that does not fit the rest of the spec."""
    arch, dataset = spec.inputs.model.arch, spec.inputs.data.dataset
    yield from _hf_options(spec.inputs.model)
    if arch is not None:
        info = ARCHS[arch]
        names = _module_names(arch, spec, info)
        if names is None:
            yield from info.kwarg_problems(arch, spec.inputs.model.arch_kwargs)
        else:
            yield from _modules(arch, spec, names)
        if dataset is not None:
            yield from _reads_data(arch, dataset, spec, info)
        yield from _sparse_table(arch, spec, info, strategy)
        yield from _language_model(arch, spec, info, strategy)
    if dataset is not None:
        yield from _data_options(dataset, spec, strategy)


def stage_problems(spec: JobSpec, strategy: Strategy, stages: int) -> Iterator[Problem]:
    """A default split must find a place for every stage the layout asks for. A factory's model is split
    once built (jobspec/stages.py), where its module names are known."""
    arch = spec.inputs.model.arch
    if stages == 1 or spec.parallel.split_at or arch is None:
        return
    info = ARCHS[arch]
    names = _module_names(arch, spec, info)
    if names is None:
        return
    most = info.max_stages(names)
    if stages > most:
        yield Problem(
            "parallel.strategy",
            f"parallel.strategy={strategy} needs {stages} stages but {arch} splits into at most "
            f"{most} by default",
            "ask for fewer GPUs/processes or give parallel.split_at",
        )

"""Whether a spec's user code fits the rest of it: a bundle to take it from, and strategies, losses and data
that can run it. Whether the functions exist is known only inside the job (trainers/user_code.py): the API
never imports user code. No torch.
"""

from __future__ import annotations

from collections.abc import Iterator

from jobspec.problems import Problem
from jobspec.spec import JobSpec, Loss, Strategy

# What describes a built-in dataset only; a data.factory takes what it needs through data.kwargs.
BUILTIN_DATA_FIELDS = frozenset(
    {
        "num_samples",
        "num_classes",
        "channels",
        "image_size",
        "val_fraction",
        "placement",
        "vocab_size",
        "bag_size",
        "block_size",
        "token_dtype",
        "tokenizer",
        "text_field",
    }
)


def entry_points(spec: JobSpec) -> dict[str, str]:
    """The fields that name a function of the code bundle, and the `module:function` each names."""
    named = {
        "model.factory": spec.inputs.model.factory,
        "data.factory": spec.inputs.data.factory,
        "train.loss": spec.train.loss_function,
    }
    return {field: entry for field, entry in named.items() if entry is not None}


def _bundle(spec: JobSpec, entries: dict[str, str]) -> Iterator[Problem]:
    if entries and spec.code is None:
        yield Problem(
            "code",
            f"{', '.join(entries)} name code of a bundle, and the spec names no bundle in code",
            "push your code with `trainyard code push DIR` (or `trainyard submit spec.json --code DIR`) "
            "and set code to the id it prints",
        )


def _strategy(spec: JobSpec, strategy: Strategy, entries: dict[str, str]) -> Iterator[Problem]:
    if strategy is Strategy.HOGWILD and entries:
        yield Problem(
            next(iter(entries)),
            f"parallel.strategy=hogwild does not run user code ({', '.join(entries)}): its worker processes "
            "share one resident built-in model and dataset",
            "use strategy ddp (it runs CPU processes too), or a built-in model.arch and data.dataset",
        )
    loss = spec.train.loss_function
    if strategy is Strategy.PIPELINE and loss is not None:
        yield Problem(
            "train.loss",
            f"parallel.strategy=pipeline computes the loss on its last stage from that stage's output and "
            f"the batch's target, so it cannot run train.loss {loss!r}, which calls the whole model",
            "use train.loss cross_entropy or mse on (input, target) batches, or strategy model_parallel, "
            "ddp or fsdp",
        )


def _data(spec: JobSpec) -> Iterator[Problem]:
    data = spec.inputs.data
    arch = spec.inputs.model.arch
    if data.factory is not None and arch is not None:
        yield Problem(
            "data.factory",
            f"model.arch {arch} is shaped by a built-in dataset's channels, classes and image size, which a "
            "data.factory does not declare",
            "use model.factory for your data, or a built-in data.dataset",
        )
    if data.factory is not None:
        for name in sorted(BUILTIN_DATA_FIELDS & data.model_fields_set):
            yield Problem(
                f"data.{name}",
                f"data.{name} describes the built-in datasets, and data.factory makes its own",
                "drop it, or pass what your factory needs in data.kwargs",
            )
    if data.dataset is not None and spec.train.loss == Loss.MSE:
        yield Problem(
            "train.loss",
            f"train.loss=mse needs real-valued targets shaped like the model's output, and data.dataset "
            f"{data.dataset} holds class labels",
            "use train.loss cross_entropy, or a data.factory with regression targets",
        )


# A program runs as its own loop under torchrun: one process per GPU (or nproc_per_node on CPU), each either
# a replica (ddp) or a shard (fsdp) of its model, which ty.prepare wraps.
PROGRAM_STRATEGIES = (Strategy.SINGLE, Strategy.DDP, Strategy.FSDP)


def _program(spec: JobSpec, strategy: Strategy) -> Iterator[Problem]:
    if spec.code is None:
        yield Problem(
            "code",
            "program runs a script of a code bundle, and the spec names no bundle in code",
            "push the folder holding the script with `trainyard code push DIR` and set code to the id it "
            "prints",
        )
    if strategy not in PROGRAM_STRATEGIES:
        yield Problem(
            "parallel.strategy",
            f"a program runs under parallel.strategy single, ddp or fsdp (ty.prepare wraps its model), not "
            f"{strategy}",
            "use strategy ddp (or auto), fsdp to shard the model, or single for one process",
        )


def user_code_problems(spec: JobSpec, strategy: Strategy) -> Iterator[Problem]:
    """Everything about the spec's user code that the spec alone can tell."""
    if spec.program is not None:
        yield from _program(spec, strategy)
        return
    entries = entry_points(spec)
    yield from _bundle(spec, entries)
    yield from _strategy(spec, strategy, entries)
    yield from _data(spec)

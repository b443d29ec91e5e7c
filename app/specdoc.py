"""The job spec reference from jobspec/spec.py's pydantic models and the catalogue (jobspec/catalog):
`python -m app.specdoc > docs/spec.md`.

Generated rather than written so the page cannot drift from what the API accepts; a unit test fails when
docs/spec.md differs from what this prints.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from enum import Enum
from typing import Annotated, Any, TypeGuard, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel, JsonValue
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from core.sweeps.spec import (
    AshaOptions,
    CategoricalParam,
    FloatParam,
    IntParam,
    MedianOptions,
    Objective,
    SweepSpec,
)
from jobspec.catalog.archs import ARCHS, Kwarg
from jobspec.catalog.datasets import DATASETS
from jobspec.spec import APEX_LEVELS, JobSpec

HEADER = """# Job spec reference

Generated from `jobspec/spec.py` by `python -m app.specdoc > docs/spec.md`; do not edit by hand.

A job spec is the JSON body of `POST /v1/jobs`. Every section is optional except `model` and `data`, or
`program` in their place: a training script of your own ([user-code.md](user-code.md#bring-your-own-script)).
Unknown fields are refused (422, naming the field and the fields allowed there), and every number is bounded.
`POST /v1/jobs?dry_run=true` shows the plan a spec resolves to without storing anything.
"""

ARCHS_NOTE = (
    "Architectures, the constructor arguments each accepts, and the module names `parallel.split_at` and "
    "`parallel.placement` may use (mlp's grow with its depth; shown at the defaults); a default split into "
    "stages starts them at the last column's modules. gpt's `block_size` defaults to `data.block_size`, "
    "and it trains with next-token cross entropy (targets of -100 left out; evaluation reports "
    "`eval_perplexity`):"
)

USER_CODE = """## User code

`model.factory`, `data.factory` and `train.loss` may name functions of a code bundle as `module:function`
(module `pkg.models` is `pkg/models.py` in the bundle); `code` names the bundle by the id that
`trainyard code push DIR` prints. The API checks only their form and never imports user code: each rank
imports the bundle (read-only, first on `sys.path`) and resolves them in the job's first seconds. A missing
module or function, a syntax error, an exception in the code or a wrong return value fails the job at once,
without a restart, with the reason `user_code_error` and the traceback's lines inside the bundle (file and
line) in its message.

- `model.factory(**model.kwargs) -> torch.nn.Module`. Every rank calls it with the same seed, so replicas
  start equal.
- `data.factory(**data.kwargs, root=...) -> (train, val)` or `(train, val, collate)`: torch `Dataset`s,
  map-style (`__getitem__` and `__len__`) or `IterableDataset`s; `val` may be `None`. `root` is `data.root`
  resolved inside `TRAINYARD_DATA_DIR`, passed only when `data.root` is set. Items are tensors, or tuples,
  lists and dicts of them; `collate` (default: torch's) makes batches of them. Batches come through a
  DataLoader with `data.loader_workers` processes, prefetching, and pinned memory on GPUs, and reach the
  device whatever their nesting.
  - A map-style dataset is sharded by a seeded `DistributedSampler`: reshuffled every epoch, the last
    incomplete batch dropped. A resumed job starts at the checkpoint's epoch and step within it and sees
    exactly the samples it would have seen.
  - An `IterableDataset` is sharded by rank and loader worker: item i goes to shard i mod (ranks x
    workers), so it must not shard itself; `set_epoch(n)` is called, where it has one, before each pass.
    Its length is unknown: `train.max_steps` is required and the run counts as one epoch (evaluation at the
    end, checkpoints by `checkpoint.every_n_steps`). A resumed job replays the stream and skips the batches
    already trained on: the same samples when the stream yields the same items in the same order each time.
  - Loader workers are seeded per (`train.seed`, rank, epoch): randomness drawn in them repeats with the
    epoch, but a job resumed mid-epoch does not replay the draws of the samples it skips. With
    `loader_workers: 0` the dataset runs in the rank itself and shares torch's random stream with the model.
- `train.loss`: `cross_entropy` (the default: `(input, class index)` batches; evaluation also reports
  `eval_accuracy`), `mse` (`(input, target)` batches, targets shaped like the output), or a function
  `loss(model, batch) -> loss | (loss, {name: metric})` of 0-d tensors: the batch's mean loss, and metrics
  reduced over the ranks like the loss and reported next to it (as `name`, and `eval_name` for evaluation).
  `model` is the model as the strategy runs it (wrapped, maybe compiled): call it. Evaluation calls the same
  function under `torch.no_grad()` on the bare model.

A `model.factory` may train on a built-in `data.dataset` (resident `(images, labels)` batches, the fast
path); a built-in `model.arch` needs a built-in dataset, which sizes it. What the planner cannot know of a
factory's model (its size, its module names) is settled once it is built: `parallel.strategy: auto` picks
ddp for several processes, and the names in `parallel.split_at`, `parallel.placement` and `parallel.wrap`
are checked against the model in the job's first seconds, failing it with the names the model has.

Strategies with a factory's model:

- single, dp, ddp: as with built-in models; `parallel.sync_batchnorm` converts its BatchNorm layers.
- fsdp: shards each module of the classes in `parallel.wrap` (inner ones first), by default each child of
  its largest `ModuleList`, else each top-level child (and the blocks of a child made of blocks).
- model_parallel: stages start at the modules `parallel.split_at` names (default: spread evenly over
  `named_children()`, a `ModuleList`'s items each named on their own, as `blocks.3`); the model's own
  `forward` runs, its inputs following the modules' devices.
- pipeline: each stage runs those modules one after another (flattening after a module named
  `avgpool`, as torchvision's classifiers do), so the model's `forward` must do exactly that. The last stage
  computes the loss from its output: `cross_entropy` or `mse` on `(input, target)` batches only, and a
  `module:function` loss is refused.
- hogwild: refused, with a `module:function` loss too: its worker processes share one resident built-in
  model and dataset.

`performance.activation_checkpointing` recomputes each block as fsdp would shard it (the classes of
`parallel.wrap`, or the children of the largest `ModuleList`, else Sequential blocks);
`performance.channels_last` applies where the model has 2-D convolutions; `performance.compile` compiles
the model as for built-ins.
"""

_BOUNDS: list[tuple[type[Any], str, str]] = [
    (at.Ge, "ge", "≥ {}"),
    (at.Gt, "gt", "> {}"),
    (at.Le, "le", "≤ {}"),
    (at.Lt, "lt", "< {}"),
    (at.MinLen, "min_length", "length ≥ {}"),
    (at.MaxLen, "max_length", "length ≤ {}"),
]


def bounds(metadata: list[Any]) -> list[str]:
    return [
        template.format(_number(getattr(item, attr)))
        for item in metadata
        for kind, attr, template in _BOUNDS
        if isinstance(item, kind)
    ]


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1e4:
        return f"{value:.0e}".replace("e+0", "e")
    return f"{value:,}" if isinstance(value, int) else str(value)


def type_name(annotation: Any) -> str:
    """`int`, `list[int]`, `Strategy`, `int | null` as a reader of JSON would call them."""
    if annotation is JsonValue:
        return "JSON"
    origin = get_origin(annotation)
    if origin is Annotated:
        return type_name(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return " | ".join("null" if a is type(None) else type_name(a) for a in get_args(annotation))
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in get_args(annotation))}]"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " | ".join(f"`{member.value}`" for member in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        name = section_name(annotation)
        return f"[{name}](#{name.replace('.', '')})"  # a heading's anchor drops its dots
    return getattr(annotation, "__name__", str(annotation))


def item_bounds(annotation: Any) -> list[str]:
    """Bounds on the elements of a list or the keys of a dict, e.g. GPU ids 0..255."""
    found = []
    for arg in get_args(annotation):
        if get_origin(arg) is Annotated:
            for info in get_args(arg)[1:]:
                if isinstance(info, FieldInfo):
                    found += [f"each {b}" for b in bounds(info.metadata)]
        elif get_args(arg):
            found += item_bounds(arg)
    return found


def default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        made = field.default_factory()  # type: ignore[call-arg]
        return "see section" if isinstance(made, BaseModel) else f"`{made!r}`"
    if field.default is PydanticUndefined:
        return "**required**"
    value = field.default.value if isinstance(field.default, Enum) else field.default
    return "`null`" if value is None else f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _is_section(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _nested(annotation: Any) -> Iterator[Any]:
    """The annotation and every type inside it: a section may be a dict's value (env's secret references)."""
    yield annotation
    for arg in get_args(annotation):
        yield from _nested(arg)


def subsections(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    """Every section inside `model`, depth first, with its dotted path (`data.augment`)."""
    for name, field in model.model_fields.items():
        for inner in _nested(field.annotation):
            if _is_section(inner):
                yield f"{path}{name}", inner
                yield from subsections(inner, f"{path}{name}.")


def section_name(model: type[BaseModel]) -> str:
    if model in SWEEP_PARTS:
        return SWEEP_PARTS[model][0]
    return next((path for path, inner in subsections(JobSpec) if inner is model), "top level")


def section(title: str, model: type[BaseModel]) -> list[str]:
    out = [title, ""]
    if model.__doc__ and model.__doc__ != BaseModel.__doc__:
        out += [" ".join(model.__doc__.split()), ""]
    return [*out, *field_table(model), ""]


def cell(text: str) -> str:
    """Text as one table cell: a pipe (as in `int | null`) would end the cell, a newline the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def field_table(model: type[BaseModel]) -> list[str]:
    lines = ["| field | type | default | bounds | description |", "| --- | --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        limits = bounds(field.metadata) + item_bounds(field.annotation)
        row = [f"`{name}`", type_name(field.annotation), default_text(field), ", ".join(limits)]
        lines.append("| " + " | ".join(cell(c) for c in [*row, field.description or ""]) + " |")
    return lines


def kwarg_text(name: str, kwarg: Kwarg) -> str:
    return f"`{name}` ({kwarg.kind.__name__}, {kwarg.bounds}, default {kwarg.default:g})"


def arch_table() -> list[str]:
    lines = [
        "| `model.arch` | reads | allowed `model.kwargs` | modules, in order | default stage starts |",
        "| --- | --- | --- | --- | --- |",
    ]
    for arch, info in ARCHS.items():
        kwargs = ", ".join(kwarg_text(name, kwarg) for name, kwarg in info.kwargs.items()) or "none"
        reads = info.input.noun + (f", at least {info.min_image_size} px" if info.min_image_size > 1 else "")
        names = info.module_names({})
        row = [f"`{arch}`", reads, kwargs, ", ".join(names), ", ".join(info.split_points(names))]
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return lines


def dataset_table() -> list[str]:
    lines = [
        "| `data.dataset` | one sample | classes | read from | evaluated on |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, info in DATASETS.items():
        source = "`data.root`" if info.on_disk else "generated or bundled"
        held_out = "its test split" if info.test_split else "`data.val_fraction` held out"
        row = [f"`{name}`", info.sample, str(info.classes), source, held_out]
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return lines


SWEEP_NOTE = """## Sweep body

The JSON body of `POST /v1/sweeps` ([sweeps.md](sweeps.md)): a job spec as above, searched over the dotted
paths of `parameters`. The spec at the space's low corner, its high corner and, up to
`TRAINYARD_SWEEP_MAX_DRY_RUNS` sets in all, categorical choices taken in turn must be a job that could run, or
the sweep is a 422 naming `parameters.<path>` or `spec.<field>`.
"""

# The sweep body's parts: a heading each (its anchor drops the dot), and what it is.
SWEEP_PARTS: dict[type[BaseModel], tuple[str, str]] = {
    FloatParam: ("sweep.float", 'a `parameters` entry of `"type": "float"`'),
    IntParam: ("sweep.int", 'a `parameters` entry of `"type": "int"`'),
    CategoricalParam: ("sweep.categorical", 'a `parameters` entry of `"type": "categorical"`'),
    Objective: ("sweep.objective", "`objective`"),
    AshaOptions: ("sweep.asha", "`pruner_options` of `asha` (Optuna's SuccessiveHalvingPruner)"),
    MedianOptions: ("sweep.median", "`pruner_options` of `median` (Optuna's MedianPruner)"),
}


def sweep_section() -> list[str]:
    out = [SWEEP_NOTE, *field_table(SweepSpec), ""]
    for model, (name, what) in SWEEP_PARTS.items():
        out += [f"### {name}", "", what + ":", "", *field_table(model), ""]
    return out


def render() -> str:
    out = [HEADER, "## top level", "", *field_table(JobSpec), ""]
    aliases = ", ".join(f"`{level}` → `{precision.value}`" for level, precision in APEX_LEVELS.items())
    out += [f"`precision` also accepts apex opt levels: {aliases}.", ""]
    for name, field in JobSpec.model_fields.items():
        # A section may be optional (`model: ModelSpec | None`): its model is then one of the union's members.
        model = next((t for t in _nested(field.annotation) if _is_section(t)), None)
        if model is not None:
            out += section(f"## {name}", model)
            for path, inner in subsections(model, f"{name}."):
                out += section(f"### {path}", inner)
            if name == "model":
                out += [ARCHS_NOTE, "", *arch_table(), ""]
            if name == "data":
                out += ["Datasets (nothing is downloaded):", "", *dataset_table(), ""]
    out += [USER_CODE, *sweep_section()]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")

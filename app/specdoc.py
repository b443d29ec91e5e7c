"""The job spec reference from trainers/spec.py's pydantic models and the catalogue (trainers/catalog):
`python -m app.specdoc > docs/spec.md`.

Generated rather than written so the page cannot drift from what the API accepts; a unit test fails when
docs/spec.md differs from what this prints.
"""

from __future__ import annotations

import types
from enum import Enum
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from trainers.catalog.archs import ARCHS, Kwarg
from trainers.catalog.datasets import DATASETS
from trainers.spec import APEX_LEVELS, JobSpec

HEADER = """# Job spec reference

Generated from `trainers/spec.py` by `python -m app.specdoc > docs/spec.md`; do not edit by hand.

A job spec is the JSON body of `POST /v1/jobs`. Every section is optional except `model` and `data`. Unknown
fields are refused (422, naming the field and the fields allowed there), and every number is bounded.
`POST /v1/jobs?dry_run=true` shows the plan a spec resolves to without storing anything.
"""

ARCHS_NOTE = (
    "Architectures, the constructor arguments each accepts, and the module names `parallel.split_at` and "
    "`parallel.placement` may use (mlp's grow with its depth; shown at the defaults); a default split into "
    "stages starts them at the last column's modules:"
)

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
        return f"[{section_name(annotation)}](#{section_name(annotation)})"
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


def section_name(model: type[BaseModel]) -> str:
    for name, field in JobSpec.model_fields.items():
        if field.annotation is model:
            return name
    return "top level"


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
        "| `model.arch` | reads | allowed `model.kwargs` | top-level modules | default stage starts |",
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


def render() -> str:
    out = [HEADER, "## top level", "", *field_table(JobSpec), ""]
    aliases = ", ".join(f"`{level}` → `{precision.value}`" for level, precision in APEX_LEVELS.items())
    out += [f"`precision` also accepts apex opt levels: {aliases}.", ""]
    for name, field in JobSpec.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            out += [f"## {name}", ""]
            if model.__doc__ and model.__doc__ != BaseModel.__doc__:
                out += [" ".join(model.__doc__.split()), ""]
            out += [*field_table(model), ""]
            if name == "model":
                out += [ARCHS_NOTE, "", *arch_table(), ""]
            if name == "data":
                out += ["Datasets (nothing is downloaded):", "", *dataset_table(), ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")

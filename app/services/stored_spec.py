"""A job's spec as the database keeps it: the fields the user wrote and those the service set (a retry's
checkpoint.resume_from), never the defaults pydantic fills in. A retry then validates what was written, as
its first submission did: a default stored beside a field it contradicts (data.bag_size beside
data.factory) would be taken for the user's own choice. Rows stored with every default expanded (before
0011) are read back without the fields that hold their default."""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec

_UNIONS = (Union, types.UnionType)


def stored_form(spec: JobSpec) -> dict[str, Any]:
    """What the user wrote, nested sections too, as JSON; what a job row's spec holds."""
    stored = spec.model_dump(mode="json", exclude_unset=True)
    if "precision" in stored:  # "O1" as written rather than its fp16, so that messages keep quoting it
        stored["precision"] = spec.precision_written
    return stored


def expanded(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored spec with every default written, for readers that compare what jobs ran (services/specdiff):
    a field left out and one written with its default are alike. One that no longer validates is as stored."""
    try:
        return JobSpec.model_validate(stored).model_dump(mode="json")
    except ValidationError:
        return stored


def _section(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: `DataSpec | None` is DataSpec; a list or dict of them is not a section."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _section(get_args(annotation)[0])
    if origin in _UNIONS:
        return next(filter(None, map(_section, get_args(annotation))), None)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _default(field: FieldInfo) -> Any:
    """The field's default as JSON; a section's default (its own defaults) as a whole object."""
    return to_jsonable_python(field.get_default(call_default_factory=True))


def without_defaults(values: dict[str, Any], model: type[BaseModel] = JobSpec) -> dict[str, Any]:
    """`values` less each field of `model` that holds its default, section by section, and less each section
    left empty (unless its default is null: `lora: {}` asks for adapters). Keys the model does not know are
    kept, for validation to name."""
    kept: dict[str, Any] = {}
    for name, value in values.items():
        field = model.model_fields.get(name)
        if field is None:
            kept[name] = value
            continue
        default = None if field.is_required() else _default(field)
        section = _section(field.annotation)
        if section is not None and isinstance(value, dict):
            value = without_defaults(value, section)
            if not value and isinstance(default, dict):
                continue
        if field.is_required() or value != default:
            kept[name] = value
    return kept


def same_spec(stored: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two stored specs ask for the same job, whether or not either has its defaults written."""
    return without_defaults(stored) == without_defaults(other)


def _planned(values: dict[str, Any]) -> JobSpec:
    spec = JobSpec.model_validate(values)
    resolve_plan(spec)  # on no hosts: whether the fields agree with each other, not with the cluster
    return spec


def revalidated(stored: dict[str, Any]) -> JobSpec:
    """A stored spec, validated and planned as at its submission; one that no longer passes is tried without
    its default-valued fields, which an older row holds as if the user had written them. Raises the stored
    form's own error (a ValidationError, or the planner's SpecError) when neither passes."""
    try:
        return _planned(stored)
    except ValueError as error:
        sparse = without_defaults(stored)
        if sparse == stored:
            raise
        try:
            return _planned(sparse)
        except ValueError:
            raise error from None

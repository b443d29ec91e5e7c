"""Field types the spec's sections share: strict sections, enum choices that list themselves, JSON numbers,
and entry points into a user's code bundle. No torch: the API validates specs with these.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Annotated, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict


class Section(BaseModel):
    # Strict: a value keeps the JSON type it was sent with. Lax mode would read "5" as 5 and 1 as true, so a
    # mistyped spec would run with values the user never wrote; ints are still taken where floats are due.
    model_config = ConfigDict(extra="forbid", strict=True)


AnyEnum = TypeVar("AnyEnum", bound=StrEnum)
# Strict mode takes a plain string for an enum only from raw JSON, but the API (FastAPI) and the worker (a
# stored spec) validate parsed JSON, where enum values are plain strings: enum fields take their values.
Choice = Annotated[AnyEnum, Strict(False)]


def known(choices: type[StrEnum], field: str, value: object) -> object:
    """A message that lists the choices, where pydantic's would quote each one."""
    if isinstance(value, str) and value not in {member.value for member in choices}:
        raise ValueError(f"unknown {field} {value!r}; choose one of {', '.join(choices)}")
    return value


def json_number(value: object) -> object:
    """One message per bad value, where the int | float union would give one per member."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a JSON number, got {json.dumps(value, default=repr)}")
    return value


KwargValue = Annotated[int | float, BeforeValidator(json_number)]

# `module:function`: a dotted module path inside the code bundle, a colon, a function's name. Checked for
# shape only: the API never imports user code, so whether the function exists is known inside the job.
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
ENTRY_POINT = re.compile(rf"{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}")


def entry_point(value: str) -> str:
    if not ENTRY_POINT.fullmatch(value):
        raise ValueError(
            f"{value!r} is not 'module:function'; name a module of your code bundle, a colon and a function "
            "in it, like 'models:build' (or 'pkg.models:build' for pkg/models.py)"
        )
    return value


EntryPoint = Annotated[str, Field(max_length=200), AfterValidator(entry_point)]

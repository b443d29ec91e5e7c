"""A program: the user's own training script, run by torchrun on every rank instead of the trainer's loop.
Field-level checks only; whether the script is in the bundle is the API's question (it holds the bundle's
file list), and whether it runs is known inside the job. No torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import Field, JsonValue, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from jobspec.spec_fields import Section

# The interpreter a user writes in front of the script: the job's own runs it, never one on PATH.
PYTHONS = frozenset({"python", "python3"})
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

Arg = Annotated[str, Field(min_length=1, max_length=4096)]


@dataclass(frozen=True)
class Target:
    """What the entrypoint runs: a script of the bundle (relative path) or a module (`-m pkg`), and its
    arguments."""

    script: str | None
    module: str | None
    args: list[str]


def parse_entrypoint(entrypoint: list[str]) -> Target:
    """`[python] train.py ARGS` or `[python] -m pkg ARGS`; raises ValueError naming the form to use."""
    words = entrypoint[1:] if entrypoint and entrypoint[0] in PYTHONS else entrypoint
    if words[:1] == ["-m"]:
        if len(words) < 2 or not _MODULE.fullmatch(words[1]):
            raise ValueError(
                f"program.entrypoint {entrypoint} names no module after -m; write ['python', '-m', 'pkg']"
            )
        return Target(None, words[1], words[2:])
    if not words or words[0].startswith("-"):
        raise ValueError(
            f"program.entrypoint {entrypoint} names no script; write ['python', 'train.py', ...] "
            "(a .py file of the code bundle) or ['python', '-m', 'pkg', ...]"
        )
    script = PurePosixPath(words[0])
    if script.is_absolute() or ".." in script.parts or script.suffix != ".py":
        raise ValueError(
            f"program.entrypoint's script {words[0]!r} must be a .py file inside the code bundle, as a path "
            "relative to its root, like 'train.py' or 'src/train.py'"
        )
    return Target(str(script), None, words[1:])


class ProgramSpec(Section):
    """Your own training script, run by torchrun on every rank (docs/user-code.md: "Bring your own script").
    It reports through `trainyard.job`; a script that does not still runs, with its logs and exit status."""

    entrypoint: list[Arg] = Field(
        min_length=1,
        max_length=256,
        description="argv, never a shell: ['python', 'train.py', '--lr', '3e-4'] or ['python', '-m', 'pkg']; "
        "the script is a path in the code bundle, which is the working directory",
    )
    hyperparameters: dict[str, JsonValue] = Field(
        default_factory=dict,
        max_length=256,
        description="any JSON object: stored and shown with the job, compared by `trainyard compare`, "
        "and given to the script as ty.init().hyperparameters",
    )

    @field_validator("entrypoint")
    @classmethod
    def runnable(cls, entrypoint: list[str]) -> list[str]:
        parse_entrypoint(entrypoint)
        return entrypoint

    @property
    def target(self) -> Target:
        return parse_entrypoint(self.entrypoint)


def check_program_or_inputs(data: object) -> None:
    """A job trains `model` on `data`, or runs a `program`: never both, and one of them. Raised with each
    field's own location, so the 422 names it."""
    if not isinstance(data, dict):
        return
    given = {name for name in ("program", "model", "data") if data.get(name) is not None}
    errors: list[InitErrorDetails]
    if "program" in given:
        errors = [
            InitErrorDetails(
                type=PydanticCustomError(
                    "program_exclusive",
                    "program and {field} exclude each other: a program builds its own model and data; drop "
                    "{field}, or drop program to train the spec's model",
                    {"field": name},
                ),
                loc=(name,),
                input=data[name],
            )
            for name in ("model", "data")
            if name in given
        ]
    else:
        errors = [
            InitErrorDetails(type="missing", loc=(name,), input=data)
            for name in ("model", "data")
            if name not in given
        ]
    if errors:
        raise ValidationError.from_exception_data("JobSpec", errors)


def missing_script(program: ProgramSpec, files: list[str], complete: bool) -> str | None:
    """Why the bundle whose file paths are `files` cannot run `program`'s script, or None when it can or
    cannot be told (`complete` is False when the bundle holds more files than were listed)."""
    script = program.target.script
    if script is None or script in files or not complete:
        return None
    near = sorted(name for name in files if name.endswith(".py"))[:10]
    return (
        f"program.entrypoint runs {script!r}, and the code bundle holds no such file (its .py files: "
        f"{', '.join(near) or 'none'}); give the script's path relative to the pushed folder"
    )

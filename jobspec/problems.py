"""What is wrong with a spec, as data: the field to blame, what is wrong with it, and how to fix it.

The planner raises one SpecError carrying every problem it finds, so a user fixes a spec in one round trip;
the API maps each problem's field straight into its 422, never reading the message to find it. No torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    field: str  # the dotted path into the spec: "parallel.split_at", "model.kwargs.depth"
    message: str  # what is wrong, naming the bad value
    fix: str = ""  # what to change; empty where the message itself says it (the API's database checks)

    def __str__(self) -> str:
        return f"{self.message}; {self.fix}" if self.fix else self.message


class SpecError(ValueError):
    """A spec, well-formed field by field, that cannot run as written. A ValueError, so code that builds a
    model or loads data outside the API (the trainer) refuses it like any other bad value."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{p.field}: {p}" for p in self.problems))


def refuse(field: str, message: str, fix: str) -> SpecError:
    """A SpecError of one problem, for the steps that cannot go on past it."""
    return SpecError([Problem(field, message, fix)])

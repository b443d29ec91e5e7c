"""What `--output json` prints where a command shows several of the API's answers together. Pydantic models,
so a module of their own, which only those commands import when they print: pydantic and the API's schemas
are most of a call's start-up, and every call loads the commands' modules."""

from __future__ import annotations

from pydantic import BaseModel

from app.cli.summary import Summary
from app.schemas import SpecDiff, SweepPublic, TrialPublic


class Comparison(BaseModel):
    """`compare --output json`: each job's numbers unrounded, and how the specs differ (with --diff)."""

    jobs: list[Summary]
    diff: SpecDiff | None


class SweepDetail(BaseModel):
    """`sweep status --output json`: the two API answers the command shows, together."""

    sweep: SweepPublic
    trials: list[TrialPublic]

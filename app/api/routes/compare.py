"""/v1/compare: how jobs differ in what they ran, for the Compare page and `trainyard compare --diff`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from app.api.deps import DB_INT_MAX, CallerDep, CanonicalInt, SessionDep
from app.api.openapi import problems
from app.schemas import SpecDiff
from app.services.specdiff import compare_jobs

router = APIRouter(tags=["jobs"], responses=problems(404))

MAX_COMPARED = 20

JobIdParam = Annotated[int, CanonicalInt, Field(ge=1, le=DB_INT_MAX)]


@router.get("/compare")
def compare(
    session: SessionDep,
    caller: CallerDep,
    job: Annotated[
        list[JobIdParam],
        Query(min_length=1, max_length=MAX_COMPARED, description="a job id; repeat it: ?job=3&job=4"),
    ],
) -> SpecDiff:
    """Where the jobs' specs and plans differ, field by field, and in one line."""
    return compare_jobs(session, job, caller)

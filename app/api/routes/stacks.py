"""/v1/jobs/{id}/stacks: every rank's Python stacks, captured by the worker that runs the job (on request, or
when it stalled) and kept as the job's latest capture. The owner or an admin only, like the job itself."""

from __future__ import annotations

from fastapi import APIRouter, status

from app.api.deps import OwnedJob, SessionDep
from app.api.openapi import problem, problems
from app.schemas import StacksPublic
from app.services.stacks import ask_for_stacks, latest_stacks

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.post(
    "/{job_id}/stacks",
    status_code=status.HTTP_202_ACCEPTED,
    responses={**problems(404), 409: problem("the job is not running: it has no ranks to ask")},
)
def ask_stacks(job: OwnedJob, session: SessionDep) -> None:
    """Ask the job's worker to capture its ranks' stacks now; GET shows them once taken (a few seconds)."""
    ask_for_stacks(session, job)


@router.get(
    "/{job_id}/stacks",
    responses={404: problem("no such job, or no stacks captured for it yet")},
)
def get_stacks(job: OwnedJob, session: SessionDep) -> StacksPublic:
    return latest_stacks(session, job)

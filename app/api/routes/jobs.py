"""/v1/jobs: submit, list, inspect, cancel, retry and delete training jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from sqlalchemy.orm import Session

from app.api.deps import DB_INT_MAX, CallerDep, JobId, OwnedJobId, SessionDep, SettingsDep
from app.api.openapi import BODY_PROBLEMS, problem, problems
from app.schemas import JobEventPublic, JobEventsPublic, JobPublic, JobsPublic, JobSubmitted, JobUpdate
from app.services import jobs, submit
from app.services.keys import Caller
from core.config import Settings
from core.db import read_in_connection, run_in_session
from core.states import JobStatus
from trainers.plan import Plan
from trainers.spec import JobSpec

router = APIRouter(prefix="/jobs", tags=["jobs"])


def _submitted(session: Session, job_id: int, caller: Caller) -> JobSubmitted:
    job = jobs.public_job(session.connection(), job_id, caller)
    return JobSubmitted(job=job, plan=Plan.model_validate(job.plan))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"description": "a dry run, or a replay of an earlier request with the same key"},
        409: problem("the Idempotency-Key was used with another body"),
        **BODY_PROBLEMS,
        **problems(429),
    },
)
async def create_job(
    spec: JobSpec,
    settings: SettingsDep,
    caller: CallerDep,
    response: Response,
    dry_run: bool = False,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=128)] = None,
) -> JobSubmitted:
    # async, with the whole unit of work in one pool-thread hop: a sync route and its sync dependencies hop
    # once each, and a hop that waits for a free thread while holding a connection can stall the others.
    if dry_run:
        response.status_code = status.HTTP_200_OK
        return JobSubmitted(job=None, plan=await run_in_session(submit.dry_run, settings, spec, caller))
    submitted, created = await run_in_session(_submit, settings, spec, caller, idempotency_key)
    if not created:
        response.status_code = status.HTTP_200_OK
    return submitted


def _submit(
    session: Session, settings: Settings, spec: JobSpec, caller: Caller, idempotency_key: str | None
) -> tuple[JobSubmitted, bool]:
    job_id, created = submit.submit_job(session, settings, spec, caller, idempotency_key=idempotency_key)
    return _submitted(session, job_id, caller), created


@router.get("")
def list_jobs(
    session: SessionDep,
    caller: CallerDep,
    status_filter: Annotated[JobStatus | None, Query(alias="status")] = None,
    cursor: Annotated[
        int | None, Query(ge=1, le=DB_INT_MAX, description="the next_cursor of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> JobsPublic:
    page, next_cursor = jobs.list_jobs(session, caller, status_filter, cursor, limit)
    return JobsPublic(data=page, next_cursor=next_cursor)


@router.get("/{job_id}", response_model=JobPublic, responses=problems(404))
async def get_job(job_id: JobId, caller: CallerDep) -> Response:
    # The API's hottest route (clients poll it): one indexed read and no pool-thread hop on SQLite. Most
    # requests reach it through app/api/fast_lookup.py, which calls it without FastAPI's routing; it renders
    # its own body, so both ways in send the same bytes and neither pays FastAPI's response validation.
    body = await read_in_connection(jobs.public_job_json, job_id, caller)
    return Response(body, media_type="application/json")


@router.patch(
    "/{job_id}", responses={**problems(404), **BODY_PROBLEMS, 409: problem("the job is no longer queued")}
)
def update_job(job_id: OwnedJobId, update: JobUpdate, session: SessionDep, caller: CallerDep) -> JobPublic:
    jobs.set_priority(session, job_id, update.priority)
    return jobs.public_job(session.connection(), job_id, caller)


@router.post(
    "/{job_id}/cancel",
    responses={
        202: {"description": "the job is running: its worker stops it (status cancelling)"},
        **problems(404),
        409: problem("the job has already finished"),
    },
)
def cancel_job(job_id: OwnedJobId, session: SessionDep, caller: CallerDep, response: Response) -> JobPublic:
    job = jobs.cancel_job(session, job_id)
    if job.status == JobStatus.CANCELLING:
        response.status_code = status.HTTP_202_ACCEPTED
    return jobs.public_job(session.connection(), job_id, caller)


@router.post(
    "/{job_id}/retry",
    status_code=status.HTTP_201_CREATED,
    responses={**problems(404, 429), 409: problem("the job has not finished, or succeeded")},
)
def retry_job(
    job_id: OwnedJobId, session: SessionDep, settings: SettingsDep, caller: CallerDep
) -> JobSubmitted:
    return _submitted(session, submit.retry_job(session, settings, job_id, caller), caller)


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={**problems(404), 409: problem("the job has not finished; cancel it first")},
)
def delete_job(job_id: OwnedJobId, session: SessionDep, settings: SettingsDep) -> None:
    jobs.delete_job(session, settings, job_id)


@router.get("/{job_id}/events", responses=problems(404))
def list_events(job_id: OwnedJobId, session: SessionDep) -> JobEventsPublic:
    events = jobs.list_events(session, job_id)
    return JobEventsPublic(data=[JobEventPublic.model_validate(event) for event in events])

"""/v1/jobs: submit, list, inspect, cancel, retry and delete training jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from sqlalchemy.orm import Session

from app.api.deps import DB_INT_MAX, CallerDep, OwnedJobId, SessionDep, SettingsDep
from app.api.openapi import BODY_PROBLEMS, problem, problems
from app.models import Job
from app.schemas import JobEventPublic, JobEventsPublic, JobPublic, JobsPublic, JobSubmitted, JobUpdate
from app.services import jobs, submit
from app.states import JobStatus
from trainers.plan import Plan
from trainers.spec import JobSpec

router = APIRouter(prefix="/jobs", tags=["jobs"])


def _public(session: Session, job: Job) -> JobPublic:
    [public] = jobs.describe(session, [job])
    return public


def _submitted(session: Session, job: Job) -> JobSubmitted:
    return JobSubmitted(job=_public(session, job), plan=Plan.model_validate(job.plan))


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
def create_job(
    spec: JobSpec,
    session: SessionDep,
    settings: SettingsDep,
    caller: CallerDep,
    response: Response,
    dry_run: bool = False,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=128)] = None,
) -> JobSubmitted:
    if dry_run:
        response.status_code = status.HTTP_200_OK
        return JobSubmitted(job=None, plan=submit.dry_run(session, settings, spec, caller))
    job, created = submit.submit_job(session, settings, spec, caller, idempotency_key=idempotency_key)
    if not created:
        response.status_code = status.HTTP_200_OK
    return _submitted(session, job)


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
    return JobsPublic(data=jobs.describe(session, page), next_cursor=next_cursor)


@router.get("/{job_id}", responses=problems(404))
def get_job(job_id: OwnedJobId, session: SessionDep) -> JobPublic:
    return _public(session, jobs.get_job(session, job_id))


@router.patch(
    "/{job_id}", responses={**problems(404), **BODY_PROBLEMS, 409: problem("the job is no longer queued")}
)
def update_job(job_id: OwnedJobId, update: JobUpdate, session: SessionDep) -> JobPublic:
    return _public(session, jobs.set_priority(session, job_id, update.priority))


@router.post(
    "/{job_id}/cancel",
    responses={
        202: {"description": "the job is running: its worker stops it (status cancelling)"},
        **problems(404),
        409: problem("the job has already finished"),
    },
)
def cancel_job(job_id: OwnedJobId, session: SessionDep, response: Response) -> JobPublic:
    job = jobs.cancel_job(session, job_id)
    if job.status == JobStatus.CANCELLING:
        response.status_code = status.HTTP_202_ACCEPTED
    return _public(session, job)


@router.post(
    "/{job_id}/retry",
    status_code=status.HTTP_201_CREATED,
    responses={**problems(404, 429), 409: problem("the job has not finished, or succeeded")},
)
def retry_job(
    job_id: OwnedJobId, session: SessionDep, settings: SettingsDep, caller: CallerDep
) -> JobSubmitted:
    return _submitted(session, submit.retry_job(session, settings, job_id, caller))


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

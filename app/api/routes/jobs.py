"""/v1/jobs: submit, list, inspect, cancel, retry and delete training jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from sqlalchemy.orm import Session

from app.api.caching import JSON, IfNoneMatch, revalidated, revalidated_json
from app.api.deps import DB_INT_MAX, CallerDep, CanonicalInt, JobId, OwnedJob, SessionDep, SettingsDep
from app.api.openapi import BODY_PROBLEMS, problem, problems
from app.schemas import (
    JobEventPublic,
    JobEventsPublic,
    JobPublic,
    JobsPublic,
    JobSubmitted,
    JobUpdate,
    RetryFrom,
)
from app.services import jobs, submit
from app.services.keys import Caller
from core.config import Settings, get_settings
from core.db import run_in_session, run_key_read, run_read
from core.states import JobStatus
from jobspec.plan import Plan
from jobspec.spec import JobSpec

router = APIRouter(prefix="/jobs", tags=["jobs"])

# A request repeated with the same key (a client's retry after a lost answer) gets the job the first one made.
IdempotencyKey = Annotated[str | None, Header(min_length=1, max_length=128)]


def _submitted(session: Session, submitted: submit.Submitted, caller: Caller) -> JobSubmitted:
    # As GET shows it: the row the submission's last write returned, or, for an earlier request's job, read.
    row = submitted.shown or jobs.get_owned_row(session, submitted.job_id, caller)
    job = jobs.public_job(session, row)
    return JobSubmitted(job=job, plan=Plan.model_validate(job.plan))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobSubmitted,
    responses={
        200: {"description": "a dry run, or a replay of an earlier request with the same key"},
        409: problem("the Idempotency-Key was used with another body"),
        **BODY_PROBLEMS,
        **problems(429),
    },
)
async def create_job(
    spec: JobSpec,
    caller: CallerDep,
    dry_run: bool = False,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    # Not a plain `def` with SessionDep like the other routes: clients submit in bursts, and on SQLite
    # run_in_session lets only a few submissions write at once, each whole unit of work in one thread hop.
    # The answer is serialised once, from the models built for it, where a returned model would be dumped,
    # validated again and serialised (FastAPI's response_model, which stays for the OpenAPI schema). The
    # settings are read here rather than through SettingsDep: each dependency is solved on every request.
    settings = get_settings()
    if dry_run:
        planned = JobSubmitted(job=None, plan=await run_in_session(submit.dry_run, settings, spec, caller))
        return Response(planned.model_dump_json(), media_type=JSON)
    body, created = await run_in_session(_submit, settings, spec, caller, idempotency_key)
    return Response(body, status.HTTP_201_CREATED if created else status.HTTP_200_OK, media_type=JSON)


def _submit(
    session: Session, settings: Settings, spec: JobSpec, caller: Caller, idempotency_key: str | None
) -> tuple[bytes, bool]:
    submitted = submit.submit_job(session, settings, spec, caller, idempotency_key=idempotency_key)
    return _submitted(session, submitted, caller).model_dump_json().encode(), submitted.created


@router.get(
    "",
    response_model=JobsPublic,
    responses=revalidated("the page"),
)
async def list_jobs(
    caller: CallerDep,
    status_filter: Annotated[JobStatus | None, Query(alias="status")] = None,
    cursor: Annotated[
        int | None,
        CanonicalInt,
        Query(ge=1, le=DB_INT_MAX, description="the next_cursor of the previous page"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    if_none_match: IfNoneMatch = None,
) -> Response:
    # The dashboard's jobs page polls this. Serialised once from the models built for it, where a returned
    # model would be dumped, validated again and serialised (FastAPI's response_model); a page unchanged
    # since the client's copy is a 304 without a body.
    page, next_cursor = await run_read(jobs.list_jobs, caller, status_filter, cursor, limit)
    return revalidated_json(JobsPublic(data=page, next_cursor=next_cursor), if_none_match)


@router.get(
    "/{job_id}",
    response_model=JobPublic,
    responses={
        **revalidated("the job"),
        **problems(404),
    },
)
async def get_job(job_id: JobId, caller: CallerDep, if_none_match: IfNoneMatch = None) -> Response:
    # The route clients poll most: the session, the row, the owner check and the queue position read at once
    # (run_key_read), where SessionDep and OwnedJob would take a trip each to anyio's pool.
    shown = await run_key_read(_shown_job, job_id, caller)
    return revalidated_json(shown, if_none_match)


def _shown_job(session: Session, job_id: int, caller: Caller) -> JobPublic:
    row = jobs.get_owned_row(session, job_id, caller)
    return jobs.public_job(session, row, row.queue_head)


@router.patch(
    "/{job_id}", responses={**problems(404), **BODY_PROBLEMS, 409: problem("the job is no longer queued")}
)
def update_job(
    job: OwnedJob, update: JobUpdate, session: SessionDep, settings: SettingsDep, caller: CallerDep
) -> JobPublic:
    return jobs.public_job(session, jobs.set_priority(session, settings, job.id, update.priority, caller))


@router.post(
    "/{job_id}/cancel",
    responses={
        202: {"description": "the job is running: its worker stops it (status cancelling)"},
        **problems(404),
        409: problem("the job has already finished"),
    },
)
def cancel_job(job: OwnedJob, session: SessionDep, response: Response) -> JobPublic:
    cancelled = jobs.cancel_job(session, job.id)
    if cancelled.status == JobStatus.CANCELLING:
        response.status_code = status.HTTP_202_ACCEPTED
    return jobs.public_job(session, cancelled)


@router.post(
    "/{job_id}/retry",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"description": "the job's earlier retry with the same spec, made by an earlier request"},
        **problems(404, 429),
        409: problem(
            "the job has not finished, or succeeded; or the Idempotency-Key was used with another body"
        ),
    },
)
def retry_job(
    job: OwnedJob,
    session: SessionDep,
    settings: SettingsDep,
    caller: CallerDep,
    response: Response,
    start: Annotated[
        RetryFrom,
        Query(
            alias="from",
            description="latest: from the job's latest checkpoint; scratch: its spec as submitted",
        ),
    ] = RetryFrom.LATEST,
    again: Annotated[
        bool, Query(description="make another retry even if an earlier request made one with the same spec")
    ] = False,
    idempotency_key: IdempotencyKey = None,
) -> JobSubmitted:
    submitted = submit.retry_job(
        session, settings, job.id, caller, start=start, again=again, idempotency_key=idempotency_key
    )
    if not submitted.created:
        response.status_code = status.HTTP_200_OK
    return _submitted(session, submitted, caller)


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={
        **problems(404),
        409: problem("the job has not finished; cancel it first"),
        500: problem("its files could not be moved aside: the job is kept"),
    },
)
def delete_job(job: OwnedJob, session: SessionDep, settings: SettingsDep) -> None:
    jobs.delete_job(session, settings, job)


@router.get("/{job_id}/events", responses=problems(404))
def list_events(job: OwnedJob, session: SessionDep) -> JobEventsPublic:
    events = jobs.list_events(session, job.id)
    return JobEventsPublic(data=[JobEventPublic.model_validate(event) for event in events])

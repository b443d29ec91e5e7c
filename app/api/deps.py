"""Dependencies shared by the routes, typed so route signatures read like declarations."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path
from sqlalchemy.orm import Session

from app.api.auth import get_caller
from app.services.code import get_owned_bundle
from app.services.jobs import get_owned_job
from app.services.keys import Caller
from core.config import Settings, get_settings
from core.db import new_session
from core.models import CodeBundle, Job
from trainers.spec import CODE_ID_PATTERN


def get_session() -> Iterator[Session]:
    with new_session() as session:
        yield session


async def current_settings() -> Settings:
    return get_settings()


SessionDep = Annotated[Session, Depends(get_session)]
# `async`: settings are read once and kept, so there is nothing to wait for in a pool thread.
SettingsDep = Annotated[Settings, Depends(current_settings)]
# Every /v1 router depends on get_caller (app/main.py); routes that need to know who is asking name it again,
# and FastAPI runs it once per request.
CallerDep = Annotated[Caller, Depends(get_caller)]

# Ids and steps are 32-bit INTEGER columns on PostgreSQL; larger values could only miss anyway.
DB_INT_MAX = 2**31 - 1
JobId = Annotated[int, Path(ge=1, le=DB_INT_MAX, description="job id")]


def owned_job(job_id: JobId, session: SessionDep, caller: CallerDep) -> Job:
    """The path's job, if it is the caller's: another user's job is a 404, like a missing one, so ids cannot
    be probed."""
    return get_owned_job(session, job_id, caller)


OwnedJob = Annotated[Job, Depends(owned_job)]


CodeId = Annotated[str, Path(pattern=CODE_ID_PATTERN, description="sha256:<hex>, as POST /v1/code answered")]


def owned_code(code_id: CodeId, session: SessionDep, caller: CallerDep) -> CodeBundle:
    """The path's code bundle, if it is the caller's; another user's is a 404, like a job."""
    return get_owned_bundle(session, code_id, caller)


OwnedCode = Annotated[CodeBundle, Depends(owned_code)]

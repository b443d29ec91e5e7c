"""Dependencies shared by the routes, typed so route signatures read like declarations.

FastAPI runs every plain `def` dependency in a pool thread, one hop per dependency per request; the ones
here that do no blocking work are `async def` so they run on the event loop instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path
from sqlalchemy.orm import Session

from app.api.auth import BearerKeyAuth, bearer
from app.services.jobs import get_owned_job
from app.services.keys import Caller
from core.config import Settings, get_settings
from core.db import new_session


def get_db() -> Iterator[Session]:
    with new_session() as session:
        yield session


async def current_settings() -> Settings:
    return get_settings()


SessionDep = Annotated[Session, Depends(get_db)]
SettingsDep = Annotated[Settings, Depends(current_settings)]
# Ids and steps are 32-bit INTEGER columns on PostgreSQL; larger values could only miss anyway.
DB_INT_MAX = 2**31 - 1
JobId = Annotated[int, Path(ge=1, le=DB_INT_MAX, description="job id")]


get_caller = BearerKeyAuth(bearer)
# Every /v1 router depends on get_caller (app/main.py); routes that need to know who is asking name it again,
# and FastAPI runs it once per request.
CallerDep = Annotated[Caller, Depends(get_caller)]


def owned_job_id(job_id: JobId, session: SessionDep, caller: CallerDep) -> int:
    """The path's job id once it is known to be the caller's: another user's job is a 404, like a missing one,
    so ids cannot be probed."""
    get_owned_job(session, job_id, caller)
    return job_id


OwnedJobId = Annotated[int, Depends(owned_job_id)]

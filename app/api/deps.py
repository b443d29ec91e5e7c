"""Dependencies shared by the routes, typed so route signatures read like declarations."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, status
from pydantic import BeforeValidator
from sqlalchemy.orm import Session

from app.api.gate import gate_caller
from app.services.code import get_owned_bundle
from app.services.jobs import get_owned_job
from app.services.keys import Caller
from core.config import Settings, get_settings
from core.db import new_session
from core.models import CodeBundle, Job
from jobspec.spec import CODE_ID_PATTERN


def get_session() -> Iterator[Session]:
    with new_session() as session:
        yield session


async def current_settings() -> Settings:
    return get_settings()


SessionDep = Annotated[Session, Depends(get_session)]
# `async`: settings are read once and kept, so there is nothing to wait for in a pool thread.
SettingsDep = Annotated[Settings, Depends(current_settings)]
# Who is asking, as the gate of every /v1 router found them (app/api/gate.py).
CallerDep = Annotated[Caller, Depends(gate_caller)]


def admin_only(action: str, fix: str = "ask an admin") -> Callable[[Caller], Awaitable[None]]:
    """A route dependency that answers 403 to anyone but an admin, naming what they tried and the fix."""

    async def require_admin(caller: CallerDep) -> None:
        if not caller.is_admin:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"only an admin may {action}, and {caller.user!r} is not one; {fix}",
            )

    return require_admin


# Ids and steps are 32-bit INTEGER columns on PostgreSQL; larger values could only miss anyway.
DB_INT_MAX = 2**31 - 1
# Byte offsets into logs: far beyond any log, and still exact as a JSON number in a browser.
OFFSET_MAX = 2**53

_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")


def _canonical_int(value: object) -> object:
    """Pydantic's lax int also reads `1.0`, `1_0`, `+7`, `007` and ` 7` as numbers, so `DELETE /v1/jobs/1.0`
    would delete job 1: a number in a URL or header is taken only as written by the API itself."""
    if isinstance(value, str) and not _CANONICAL_INT.fullmatch(value):
        raise ValueError(
            f"must be an integer written in digits only, like 7 (no sign, spaces, '.', '_' or "
            f"leading zeros), got {value!r}"
        )
    return value


# Put on every integer read from a path, query or header: `Annotated[int, CanonicalInt, Query(...)]`.
CanonicalInt = BeforeValidator(_canonical_int)
JobId = Annotated[int, CanonicalInt, Path(ge=1, le=DB_INT_MAX, description="job id")]
CheckpointId = Annotated[int, CanonicalInt, Path(ge=1, le=DB_INT_MAX, description="checkpoint id")]
KeyId = Annotated[
    int, CanonicalInt, Path(ge=1, le=DB_INT_MAX, description="API key id, as GET /v1/keys lists")
]


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

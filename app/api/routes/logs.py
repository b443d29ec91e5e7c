"""/v1/jobs/{id}/logs: the launcher's or one rank's log, read in byte ranges so a client can follow it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import OFFSET_MAX, CanonicalInt, OwnedJob, SessionDep, SettingsDep
from app.api.openapi import problem, problems
from app.schemas import LogChunk
from app.services.runs import read_log
from core.secrets import values_to_mask

router = APIRouter(prefix="/jobs", tags=["logs"], responses=problems(404))

MAX_LOG_CHUNK = 1 << 20


@router.get(
    "/{job_id}/logs",
    responses={409: problem("the job's processes left a link, a FIFO or a folder where the log belongs")},
)
def get_logs(
    job: OwnedJob,
    session: SessionDep,
    settings: SettingsDep,
    rank: Annotated[int | None, Query(ge=0, le=4095, description="omit for the launcher's log")] = None,
    offset: Annotated[
        int,
        CanonicalInt,
        Query(ge=0, le=OFFSET_MAX, description="byte offset: the next_offset of the last read"),
    ] = 0,
    limit_bytes: Annotated[int, Query(ge=1, le=MAX_LOG_CHUNK)] = 64 * 1024,
) -> LogChunk:
    # The values the job's launches were given are opened for this read alone, to mask them.
    return read_log(settings, job, rank, offset, limit_bytes, values_to_mask(session, settings, job.id))

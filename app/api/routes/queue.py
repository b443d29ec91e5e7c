"""/v1/queue: the jobs waiting to start, in the order workers start them, and why each waits."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from app.api.caching import IfNoneMatch, revalidated, revalidated_json
from app.api.deps import CallerDep
from app.schemas import QueuePublic
from app.services.queue import LIMIT, list_queue
from core.db import run_read

router = APIRouter(prefix="/queue", tags=["queue"])


@router.get(
    "",
    response_model=QueuePublic,
    responses=revalidated("the queue"),
)
async def get_queue(
    caller: CallerDep,
    limit: Annotated[
        int, Query(ge=1, le=1000, description="the first this many in start order; positions count them all")
    ] = LIMIT,
    if_none_match: IfNoneMatch = None,
) -> Response:
    """Everyone sees how many jobs are ahead of theirs; only admins see the other users' jobs."""
    # The dashboard's queue page polls this: serialised once, as GET /v1/jobs is.
    queue = await run_read(list_queue, None if caller.is_admin else caller.user, limit)
    return revalidated_json(queue, if_none_match)

"""/v1/queue: the jobs waiting to start, in the order workers start them, and why each waits."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import CallerDep, SessionDep
from app.schemas import QueuePublic
from app.services.queue import list_queue

router = APIRouter(prefix="/queue", tags=["queue"])


@router.get("")
def get_queue(session: SessionDep, caller: CallerDep) -> QueuePublic:
    """Everyone sees how many jobs are ahead of theirs; only admins see the other users' jobs."""
    return list_queue(session, None if caller.is_admin else caller.user)

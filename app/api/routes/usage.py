"""/v1/usage: users' recent GPU and CPU use, as fair share orders equal priorities by it."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import CallerDep, SessionDep, SettingsDep
from app.schemas import UsagesPublic
from app.services.usage import list_usage

router = APIRouter(prefix="/usage", tags=["queue"])


@router.get("")
def get_usage(session: SessionDep, settings: SettingsDep, caller: CallerDep) -> UsagesPublic:
    """Your own use; admins see every user's."""
    return list_usage(session, settings, None if caller.is_admin else caller.user)

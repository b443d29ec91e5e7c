"""/v1/gpus: every worker host (up or down, with its address), its GPUs and the job holding each."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import SessionDep, SettingsDep
from app.schemas import HostsPublic
from app.services.gpus import list_host_gpus

router = APIRouter(prefix="/gpus", tags=["gpus"])


@router.get("")
def get_gpus(session: SessionDep, settings: SettingsDep) -> HostsPublic:
    return list_host_gpus(session, settings)

"""/v1/gpus: the GPUs of every live worker host and the job holding each."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import SessionDep, SettingsDep
from app.schemas import HostsPublic
from app.services.gpus import list_host_gpus

router = APIRouter(prefix="/gpus", tags=["gpus"])


@router.get("")
def get_gpus(session: SessionDep, settings: SettingsDep) -> HostsPublic:
    return list_host_gpus(session, settings)

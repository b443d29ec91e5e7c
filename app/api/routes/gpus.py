"""/v1/gpus: every worker host (up or down, with its address), its GPUs, their health and the job holding
each; admins drain a GPU (nothing new placed on it, its job requeued elsewhere) and undrain it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from app.api.deps import SessionDep, SettingsDep, admin_only
from app.api.openapi import BODY_PROBLEMS, problems
from app.schemas import GpuDrain, GpuHealthChanged, HostsPublic
from app.services.gpus import drain_gpu, list_host_gpus, undrain_gpu

router = APIRouter(prefix="/gpus", tags=["gpus"])

Host = Annotated[str, Path(max_length=255, description="the host as GET /v1/gpus names it")]
Index = Annotated[int, Path(ge=0, le=1023, description="the GPU's index on its host (NVML's, physical)")]


require_admin = admin_only("drain or undrain a GPU")


@router.get("")
def get_gpus(session: SessionDep, settings: SettingsDep) -> HostsPublic:
    return list_host_gpus(session, settings)


@router.post(
    "/{host}/{index}/drain",
    dependencies=[Depends(require_admin)],
    responses={**BODY_PROBLEMS, **problems(403, 404)},
)
def drain(
    host: Host, index: Index, body: GpuDrain, session: SessionDep, settings: SettingsDep
) -> GpuHealthChanged:
    """Place nothing new on this GPU, and ask the job running on it to stop at its next report step, after a
    checkpoint, to resume on other GPUs. It stays drained until undrained. Under Slurm, HOST is a node's
    name, and the node is drained in Slurm."""
    return drain_gpu(session, settings, host, index, body.reason)


@router.post("/{host}/{index}/undrain", dependencies=[Depends(require_admin)], responses=problems(403, 404))
def undrain(host: Host, index: Index, session: SessionDep, settings: SettingsDep) -> GpuHealthChanged:
    """The GPU is sound again (after a reset, say): jobs are placed on it, those it failed with device errors
    too."""
    return undrain_gpu(session, settings, host, index)

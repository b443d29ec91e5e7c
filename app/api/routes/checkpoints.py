"""Checkpoints: listed per job, downloaded by id."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import FileResponse

from app.api.deps import DB_INT_MAX, CallerDep, OwnedJobId, SessionDep
from app.api.openapi import problems
from app.schemas import CheckpointPublic, CheckpointsPublic
from app.services.artifacts import checkpoint_file, list_checkpoints

router = APIRouter(tags=["checkpoints"], responses=problems(404))


@router.get("/jobs/{job_id}/checkpoints")
def get_checkpoints(job_id: OwnedJobId, session: SessionDep, request: Request) -> CheckpointsPublic:
    return CheckpointsPublic(
        data=[
            CheckpointPublic(
                id=c.id,
                job_id=c.job_id,
                step=c.step,
                epoch=c.epoch,
                size_bytes=c.size_bytes,
                created_at=c.created_at,
                download_url=request.url_for("download_checkpoint", checkpoint_id=c.id).path,
            )
            for c in list_checkpoints(session, job_id)
        ]
    )


@router.get(
    "/checkpoints/{checkpoint_id}/download",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
def download_checkpoint(
    checkpoint_id: Annotated[int, Path(ge=1, le=DB_INT_MAX)], session: SessionDep, caller: CallerDep
) -> FileResponse:
    checkpoint, path = checkpoint_file(session, checkpoint_id, caller)
    return FileResponse(
        path,
        media_type="application/octet-stream",
        filename=f"job{checkpoint.job_id}-step{checkpoint.step}-{path.name}",
    )

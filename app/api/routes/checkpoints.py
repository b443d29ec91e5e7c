"""Checkpoints: listed per job, downloaded by id; and a finished job's exported model."""

from __future__ import annotations

from pathlib import Path as FilePath

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response, StreamingResponse

from app.api.deps import CallerDep, CheckpointId, OwnedJob, SessionDep, SettingsDep
from app.api.openapi import problem, problems
from app.schemas import CheckpointPublic, CheckpointsPublic
from app.services.artifacts import checkpoint_content, export_file, list_checkpoints

router = APIRouter(tags=["checkpoints"], responses=problems(404))

OCTET_STREAM = "application/octet-stream"
TAR = "application/x-tar"


@router.get("/jobs/{job_id}/checkpoints")
def get_checkpoints(job: OwnedJob, session: SessionDep, request: Request) -> CheckpointsPublic:
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
            for c in list_checkpoints(session, job.id)
        ]
    )


@router.get(
    "/checkpoints/{checkpoint_id}/download",
    response_class=FileResponse,
    responses={
        200: {"content": {OCTET_STREAM: {}}},
        409: problem("its bytes are not the ones written: the sha256 recorded then differs"),
    },
)
def download_checkpoint(
    checkpoint_id: CheckpointId,
    session: SessionDep,
    settings: SettingsDep,
    caller: CallerDep,
) -> Response:
    """From the API's disk, or streamed from the object store through the API: a redirect to a presigned URL
    would reach S3 with the client's bearer key still attached, and S3 refuses two kinds of auth at once."""
    checkpoint, content = checkpoint_content(session, settings, checkpoint_id, caller)
    filename = f"job{checkpoint.job_id}-step{checkpoint.step}-{content.name}"
    if isinstance(content, FilePath):
        return FileResponse(content, media_type=OCTET_STREAM, filename=filename)
    headers = {
        "Content-Length": str(content.size),
        "Content-Disposition": f'attachment; filename="{filename}"',
    }
    return StreamingResponse(content.chunks, media_type=OCTET_STREAM, headers=headers)


@router.get(
    "/jobs/{job_id}/export",
    response_class=FileResponse,
    responses={
        200: {"content": {TAR: {}}},
        409: problem("its bytes are not the ones written: the sha256 written beside it differs"),
    },
)
def download_export(job: OwnedJob, settings: SettingsDep) -> Response:
    """A finished hf_causal_lm job's weights, LoRA adapters merged in, as a tar of config.json,
    model.safetensors and model.path's tokenizer files: unpacked, a directory that
    AutoModelForCausalLM.from_pretrained loads."""
    return FileResponse(export_file(settings, job.id), media_type=TAR, filename=f"job{job.id}-export.tar")

"""Checkpoints: listed per job, downloaded by id; and a finished job's exported model."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.api.deps import CallerDep, CheckpointId, OwnedJob, SessionDep, SettingsDep
from app.api.downloads import attachment
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


# The job's own processes write its run directory: what is there is never read through a link.
JOB_FILE_PROBLEMS: dict[int | str, dict[str, Any]] = {
    413: problem("the file is larger than TRAINYARD_JOB_MAX_FILE_GB, the largest a job may write"),
}


@router.get(
    "/checkpoints/{checkpoint_id}/download",
    response_class=StreamingResponse,
    responses={
        200: {"content": {OCTET_STREAM: {}}},
        409: problem(
            "its bytes are not the ones written (the sha256 recorded then differs), or the job left a link, "
            "a FIFO or a folder where its file belongs"
        ),
        **JOB_FILE_PROBLEMS,
    },
)
def download_checkpoint(
    checkpoint_id: CheckpointId,
    session: SessionDep,
    settings: SettingsDep,
    caller: CallerDep,
) -> StreamingResponse:
    """From the API's disk, or streamed from the object store through the API: a redirect to a presigned URL
    would reach S3 with the client's bearer key still attached, and S3 refuses two kinds of auth at once."""
    checkpoint, content = checkpoint_content(session, settings, checkpoint_id, caller)
    filename = f"job{checkpoint.job_id}-step{checkpoint.step}-{content.name}"
    return attachment(content.chunks, content.size, OCTET_STREAM, filename)


@router.get(
    "/jobs/{job_id}/export",
    response_class=StreamingResponse,
    responses={
        200: {"content": {TAR: {}}},
        409: problem(
            "its bytes are not the ones written (the sha256 written beside it differs), or the job left a "
            "link, a FIFO or a folder where it belongs"
        ),
        **JOB_FILE_PROBLEMS,
    },
)
def download_export(job: OwnedJob, settings: SettingsDep) -> StreamingResponse:
    """A finished hf_causal_lm job's weights, LoRA adapters merged in, as a tar of config.json,
    model.safetensors and model.path's tokenizer files: unpacked, a directory that
    AutoModelForCausalLM.from_pretrained loads."""
    export = export_file(settings, job.id)
    return attachment(export.served(), export.size, TAR, f"job{job.id}-export.tar")

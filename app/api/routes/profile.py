"""What a job's trainer wrote for inspection tools: the profiler's summary as JSON and its Chrome trace as a
download, and TensorBoard's event files as a tar."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse, StreamingResponse

from app.api.deps import OwnedJob, SessionDep, SettingsDep
from app.api.openapi import problems
from app.services.profiles import profile_summary, profile_trace, tensorboard_tar
from trainers.profile_summary import ProfileSummary

router = APIRouter(tags=["profile"], responses=problems(404))

TAR = "application/x-tar"


@router.get("/jobs/{job_id}/profile")
def get_profile(job: OwnedJob, session: SessionDep, settings: SettingsDep) -> ProfileSummary:
    return profile_summary(session, settings, job.id)


@router.get(
    "/jobs/{job_id}/profile/trace",
    response_class=FileResponse,
    responses={200: {"content": {"application/json": {}}}},
)
def download_profile_trace(job: OwnedJob, session: SessionDep, settings: SettingsDep) -> FileResponse:
    # Open it in chrome://tracing or ui.perfetto.dev.
    return FileResponse(
        profile_trace(session, settings, job.id),
        media_type="application/json",
        filename=f"job{job.id}-trace.json",
    )


@router.get(
    "/jobs/{job_id}/tensorboard",
    response_class=StreamingResponse,
    responses={200: {"content": {TAR: {}}, "description": "unpack it and run `tensorboard --logdir .`"}},
)
def download_tensorboard(job: OwnedJob, session: SessionDep, settings: SettingsDep) -> StreamingResponse:
    """The job's TensorBoard event files (metrics.tensorboard) as a tar, streamed as it is read from disk."""
    return StreamingResponse(
        tensorboard_tar(session, settings, job.id),
        media_type=TAR,
        headers={"Content-Disposition": f'attachment; filename="job{job.id}-tensorboard.tar"'},
    )

"""What a job's trainer wrote for inspection tools: the profiler's summary as JSON and its Chrome trace as a
download, and TensorBoard's event files as a tar."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from app.api.deps import OwnedJob, SessionDep, SettingsDep
from app.api.downloads import attachment
from app.api.openapi import problem, problems
from app.services.profiles import profile_summary, profile_trace, tensorboard_tar
from jobspec.profile_summary import ProfileSummary

# The job's own processes write these files: one that is a link, a FIFO or too large is never read.
router = APIRouter(
    tags=["profile"],
    responses={
        **problems(404),
        409: problem("the job left a link, a FIFO or a folder where the file belongs"),
        413: problem("the file is larger than the service reads"),
    },
)

TAR = "application/x-tar"


@router.get(
    "/jobs/{job_id}/profile",
    responses={422: problem("the job's processes wrote something else than a profile summary there")},
)
def get_profile(job: OwnedJob, session: SessionDep, settings: SettingsDep) -> ProfileSummary:
    return profile_summary(session, settings, job.id)


@router.get(
    "/jobs/{job_id}/profile/trace",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/json": {}}}},
)
def download_profile_trace(job: OwnedJob, session: SessionDep, settings: SettingsDep) -> StreamingResponse:
    # Open it in chrome://tracing or ui.perfetto.dev.
    trace = profile_trace(session, settings, job.id)
    return attachment(trace.served(), trace.size, "application/json", f"job{job.id}-trace.json")


@router.get(
    "/jobs/{job_id}/tensorboard",
    response_class=StreamingResponse,
    responses={200: {"content": {TAR: {}}, "description": "unpack it and run `tensorboard --logdir .`"}},
)
def download_tensorboard(job: OwnedJob, session: SessionDep, settings: SettingsDep) -> StreamingResponse:
    """The job's TensorBoard event files (metrics.tensorboard) as a tar, streamed as it is read from disk."""
    return attachment(tensorboard_tar(session, settings, job.id), None, TAR, f"job{job.id}-tensorboard.tar")

"""A job's torch.profiler results: the summary as JSON, the Chrome trace as a download."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from app.api.deps import OwnedJob, SessionDep, SettingsDep
from app.api.openapi import problems
from app.services.profiles import profile_summary, profile_trace
from trainers.profile_summary import ProfileSummary

router = APIRouter(tags=["profile"], responses=problems(404))


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

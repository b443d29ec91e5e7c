"""A job's profile: the summary and Chrome trace its trainer wrote under runs/<job>/profile/."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from app.services.errors import ProfileNotFound
from app.services.jobs import get_job
from app.services.runs import run_dir
from core.config import Settings
from core.models import Job
from trainers.profile_summary import PROFILE_DIR, SUMMARY_FILE, TRACE_FILE, ProfileSummary
from trainers.spec import JobSpec


def _missing(job: Job) -> ProfileNotFound:
    profile = JobSpec.model_validate(job.spec).profile
    if profile.steps == 0:
        return ProfileNotFound(
            f"job {job.id} has no profile: it was submitted without profiling; submit it again with "
            '"profile": {"steps": 10} (and optionally "skip_first") to profile 10 steps'
        )
    return ProfileNotFound(
        f"job {job.id} has no profile yet: it is written after step {profile.skip_first + profile.steps} "
        f"(profile.skip_first={profile.skip_first} + profile.steps={profile.steps}); ask again later"
    )


def _profile_file(session: Session, settings: Settings, job_id: int, name: str) -> Path:
    job = get_job(session, job_id)
    path = run_dir(settings, job.id) / PROFILE_DIR / name
    if not path.is_file():
        raise _missing(job)
    return path


def profile_summary(session: Session, settings: Settings, job_id: int) -> ProfileSummary:
    path = _profile_file(session, settings, job_id, SUMMARY_FILE)
    return ProfileSummary.model_validate_json(path.read_text(encoding="utf-8"))


def profile_trace(session: Session, settings: Settings, job_id: int) -> Path:
    return _profile_file(session, settings, job_id, TRACE_FILE)

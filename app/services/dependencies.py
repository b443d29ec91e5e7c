"""A submission's depends_on and checkpoint.resume_from_job, checked against the jobs the caller may see."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.errors import InvalidSpec
from app.services.keys import Caller
from core.dependencies import jobs_text
from core.models import Job
from core.states import JobStatus
from jobspec.spec import JobSpec


def _check_resumed_job(spec: JobSpec) -> None:
    resumed = spec.checkpoint.resume_from_job
    if resumed is None:
        return
    if spec.checkpoint.resume_from is not None:
        raise InvalidSpec(
            "checkpoint.resume_from_job",
            "checkpoint.resume_from and checkpoint.resume_from_job both name a checkpoint; keep one",
        )
    if resumed not in spec.depends_on:
        raise InvalidSpec(
            "checkpoint.resume_from_job",
            f"job {resumed} is not in depends_on; add it there, so that it has succeeded and written its "
            "last checkpoint before this job starts",
        )


def unmet_dependencies(session: Session, spec: JobSpec, caller: Caller) -> list[int]:
    """The jobs of depends_on that have not ended yet, which the new job is to wait for. Each must be one the
    caller may see (another user's is reported missing, as everywhere) and none may have ended otherwise than
    succeeded. Ids must exist, so a job depends only on older ones: no cycle can be made."""
    _check_resumed_job(spec)
    if not spec.depends_on:
        return []
    found = session.execute(select(Job.id, Job.owner, Job.status).where(Job.id.in_(spec.depends_on)))
    status = {row.id: JobStatus(row.status) for row in found if caller.may_see(row.owner)}
    if missing := [job_id for job_id in spec.depends_on if job_id not in status]:
        verb = "does" if len(missing) == 1 else "do"
        raise InvalidSpec(
            "depends_on",
            f"{jobs_text(missing)} {verb} not exist; name jobs of yours (`trainyard ls`, GET /v1/jobs)",
        )
    for job_id in spec.depends_on:
        if status[job_id].is_terminal and status[job_id] is not JobStatus.SUCCEEDED:
            raise InvalidSpec(
                "depends_on",
                f"job {job_id} ended {status[job_id]}, so a job that depends on it would never start; "
                f"retry it (`trainyard retry {job_id}`) and name the retry instead",
            )
    return [job_id for job_id in spec.depends_on if not status[job_id].is_terminal]

"""Which checkpoint an attempt resumes from: the job's newest sound one on a requeued attempt, else the one
the API chose (checkpoint.resume_from, or a retry's parent's latest), else the latest of
checkpoint.resume_from_job, read as the first attempt starts (that job has succeeded by then: it is in the
spec's depends_on)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import session_scope
from core.models import Checkpoint, Job
from jobspec.plan import Plan
from jobspec.spec import JobSpec
from worker.publish import UnusableCheckpoint, resume_file
from worker.tail import note


def _resume_from(job: Job, plan: Plan, attempt: int, run_dir: Path) -> str | None:
    """The file this attempt resumes from. A requeued attempt continues from the job's newest checkpoint
    still there with the bytes recorded, and a job event names each one it passed over and why; failing
    that, and on a first attempt, from what the API chose, which must be sound too. One held in the object
    store is downloaded into `run_dir` unless this host wrote it."""
    with session_scope() as session:
        newest_first = (
            select(Checkpoint.id, Checkpoint.step, Checkpoint.path, Checkpoint.sha256)
            .where(Checkpoint.job_id == job.id)
            .order_by(Checkpoint.step.desc(), Checkpoint.id.desc())
        )
        saved = session.execute(newest_first).all() if attempt > 1 else []
        chosen = plan.resume_path or _latest_of(session, JobSpec.model_validate(job.spec))
        recorded = select(Checkpoint.sha256).where(Checkpoint.path == chosen).limit(1)
        chosen_sha256 = None if chosen is None else session.scalar(recorded)
    passed_over: list[str] = []
    for checkpoint in saved:
        name = f"checkpoint {checkpoint.id} (step {checkpoint.step})"
        try:
            found = resume_file(checkpoint.path, checkpoint.sha256, run_dir)
        except UnusableCheckpoint as why:
            passed_over.append(f"{name}: {why}")
            continue
        _note_passed_over(job.id, passed_over, f"resuming from {name}")
        return found
    _note_passed_over(
        job.id, passed_over, "resuming from checkpoint.resume_from" if chosen else "starting over"
    )
    if chosen is None:
        return None
    try:
        return resume_file(chosen, chosen_sha256, run_dir)
    except UnusableCheckpoint as why:
        raise UnusableCheckpoint(f"cannot resume from checkpoint.resume_from: {why}") from why


def _latest_of(session: Session, spec: JobSpec) -> str | None:
    """The path of checkpoint.resume_from_job's newest checkpoint; None without one (a job that saved none
    starts over, as the job event then says)."""
    if spec.checkpoint.resume_from_job is None:
        return None
    newest = (
        select(Checkpoint.path)
        .where(Checkpoint.job_id == spec.checkpoint.resume_from_job)
        .order_by(Checkpoint.step.desc(), Checkpoint.id.desc())
        .limit(1)
    )
    return session.scalar(newest)


def _note_passed_over(job_id: int, passed_over: list[str], then: str) -> None:
    if passed_over:
        with session_scope() as session:
            note(session, job_id, "checkpoint_skipped", f"{then}; passed over {'; '.join(passed_over)}")


def leased_plan(job: Job, gpu_ids: list[int], attempt: int, run_dir: Path) -> Plan:
    """The plan with the GPUs leased and the file to resume from."""
    plan = Plan.model_validate(job.plan)
    gpus = gpu_ids if plan.device == "cuda" else plan.gpus
    return plan.model_copy(update={"gpus": gpus, "resume_path": _resume_from(job, plan, attempt, run_dir)})

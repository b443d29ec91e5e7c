"""Submitting a job: plan it against this cluster, store it, then ring the worker's doorbell."""

from __future__ import annotations

import logging
import sys

from kombu.exceptions import OperationalError
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.models import Checkpoint, Job, JobEvent
from app.services.errors import IdempotencyConflict, InvalidSpec, JobStateConflict
from app.services.gpus import check_gpus_exist
from app.services.jobs import get_job
from app.services.runs import run_dir
from app.states import JobStatus
from trainers.plan import Plan, resolve_plan
from trainers.spec import JobSpec
from worker.celery_app import enqueue_job
from worker.launch import torchrun_argv

log = logging.getLogger(__name__)

OWNER = "local"  # one owner until auth exists; idempotency keys are scoped per owner
DRY_RUN_ID = "<job-id>"
RETRYABLE = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED})


def _resume_path(session: Session, checkpoint_id: int | None) -> str | None:
    if checkpoint_id is None:
        return None
    checkpoint = session.get(Checkpoint, checkpoint_id)
    if checkpoint is None:
        raise InvalidSpec(
            "checkpoint.resume_from",
            f"checkpoint {checkpoint_id} does not exist; "
            "list a job's checkpoints with GET /v1/jobs/{id}/checkpoints and use one of their ids",
        )
    return checkpoint.path


def _plan(session: Session, settings: Settings, spec: JobSpec) -> Plan:
    """The spec's own checks already passed; these need the database: GPUs that exist, a checkpoint."""
    check_gpus_exist(session, settings, spec.parallel)
    plan = resolve_plan(spec)
    plan.resume_path = _resume_path(session, spec.checkpoint.resume_from)
    return plan


def _with_argv(plan: Plan, settings: Settings, run_id: int | str) -> Plan:
    plan.argv = torchrun_argv(plan, run_dir(settings, run_id), sys.executable)
    return plan


def dry_run(session: Session, settings: Settings, spec: JobSpec) -> Plan:
    """The plan a submission would store, with a placeholder for the id it does not have yet."""
    return _with_argv(_plan(session, settings, spec), settings, DRY_RUN_ID)


def _by_key(session: Session, key: str) -> Job | None:
    return session.scalar(select(Job).where(Job.owner == OWNER, Job.idempotency_key == key))


def _replay(job: Job, spec: JobSpec, key: str) -> Job:
    if job.spec != spec.model_dump(mode="json"):
        raise IdempotencyConflict(key, job.id)
    return job


def _ring(job_id: int) -> None:
    try:
        enqueue_job(job_id)
    except OperationalError:
        # The row is committed, so the job is not lost: the worker's requeue pass re-rings queued jobs.
        log.warning("broker unreachable; job %s waits for the periodic requeue", job_id, exc_info=True)


def submit_job(
    session: Session,
    settings: Settings,
    spec: JobSpec,
    *,
    idempotency_key: str | None = None,
    message: str | None = None,
) -> tuple[Job, bool]:
    """Returns the job and whether this call created it (False: an earlier request with the same key did)."""
    if idempotency_key and (earlier := _by_key(session, idempotency_key)):
        return _replay(earlier, spec, idempotency_key), False
    plan = _plan(session, settings, spec)
    job = Job(
        name=spec.name,
        owner=OWNER,
        status=JobStatus.QUEUED,
        spec=spec.model_dump(mode="json"),
        plan={},
        priority=spec.priority,
        idempotency_key=idempotency_key,
    )
    try:
        session.add(job)
        session.flush()  # the id names the run directory in the argv
        job.plan = _with_argv(plan, settings, job.id).public()
        session.add(JobEvent(job_id=job.id, to_status=JobStatus.QUEUED, reason="submitted", message=message))
        session.commit()
    except IntegrityError:
        # A concurrent request with the same key committed first; answer as its replay.
        session.rollback()
        if idempotency_key and (earlier := _by_key(session, idempotency_key)):
            return _replay(earlier, spec, idempotency_key), False
        raise
    _ring(job.id)
    return job, True


def retry_job(session: Session, settings: Settings, job_id: int) -> Job:
    """A new job with the same spec; the old one stays as it ended, for the record."""
    old = get_job(session, job_id)
    status = JobStatus(old.status)
    if status not in RETRYABLE:
        fix = (
            "submit its spec again with POST /v1/jobs to run it once more"
            if status is JobStatus.SUCCEEDED
            else "only failed, timed_out or cancelled jobs can be retried; wait for it to end or cancel it"
        )
        raise JobStateConflict(job_id, status, fix)
    try:
        spec = JobSpec.model_validate(old.spec)
    except ValidationError as exc:
        raise InvalidSpec(
            "spec", f"job {job_id}'s spec no longer validates ({exc}); submit a fixed one"
        ) from exc
    job, _ = submit_job(session, settings, spec, message=f"retry of job {job_id}")
    return job

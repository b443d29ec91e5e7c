"""Submitting a job: plan it against this cluster, store it, then ring the worker's doorbell."""

from __future__ import annotations

import logging

from kombu.exceptions import OperationalError
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.services.artifacts import owned_checkpoint
from app.services.code import check_code
from app.services.confine import check_checkpoint_path, check_data_root
from app.services.errors import CheckpointNotFound, IdempotencyConflict, InvalidSpec, JobStateConflict
from app.services.gpus import read_inventory
from app.services.jobs import get_owned_job
from app.services.keys import Caller
from app.services.quotas import check_quota
from app.services.runs import run_dir
from core.config import Settings
from core.doorbell import enqueue_job
from core.launch import Rendezvous, torchrun_argv
from core.models import Job, JobEvent
from core.states import JobStatus
from trainers.plan import Plan, resolve_plan
from trainers.spec import JobSpec

log = logging.getLogger(__name__)

DRY_RUN_ID = "<job-id>"
RETRYABLE = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED})


def _resume_path(
    session: Session, settings: Settings, checkpoint_id: int | None, caller: Caller
) -> str | None:
    """Only the caller's own checkpoints (any, for an admin), and only files under the runs directory."""
    if checkpoint_id is None:
        return None
    try:
        checkpoint = owned_checkpoint(session, checkpoint_id, caller)
    except CheckpointNotFound as exc:
        raise InvalidSpec("checkpoint.resume_from", f"{exc}, and use one of their ids") from exc
    check_checkpoint_path(settings, "checkpoint.resume_from", checkpoint.path)
    return checkpoint.path


def check_environment(settings: Settings, name: str | None) -> None:
    if name is not None and name not in settings.environment_pythons:
        known = ", ".join(sorted(settings.environment_pythons)) or "none"
        raise InvalidSpec(
            "environment",
            f"no environment {name!r} is registered (registered: {known}); leave it out to use the "
            "worker's own, or ask the admin to add it to TRAINYARD_ENVIRONMENTS",
        )


def _plan(session: Session, settings: Settings, spec: JobSpec, caller: Caller) -> Plan:
    """The plan of a spec whose fields passed their own checks, on the cluster the workers registered; the
    checks around it need the disk or the database: a code bundle and a checkpoint the caller owns, a data
    root inside the data directory."""
    check_code(session, settings, spec, caller)
    check_environment(settings, spec.environment)
    check_data_root(settings, spec.data.root)
    plan = resolve_plan(spec, read_inventory(session, settings))
    plan.resume_path = _resume_path(session, settings, spec.checkpoint.resume_from, caller)
    return plan


def dry_run(session: Session, settings: Settings, spec: JobSpec, caller: Caller) -> Plan:
    """The plan a submission would store, with the argv a worker would build for it: a placeholder for the
    id it does not have yet, and `python` for the worker's interpreter (the worker stores its real argv when
    it launches the job)."""
    plan = _plan(session, settings, spec, caller)
    spanning = (
        None
        if plan.nnodes == 1
        else Rendezvous.placeholder(plan.nnodes, DRY_RUN_ID, settings.rendezvous_timeout_s)
    )
    plan.argv = torchrun_argv(plan, run_dir(settings, DRY_RUN_ID), "python", spanning)
    return plan


def job_by_key(session: Session, owner: str, key: str) -> Job | None:
    # Keys are scoped per owner: one user's key never reveals or replays another user's job.
    return session.scalar(select(Job).where(Job.owner == owner, Job.idempotency_key == key))


def _replay(job: Job, spec: JobSpec, key: str) -> int:
    if job.spec != spec.model_dump(mode="json"):
        raise IdempotencyConflict(key, job.id)
    return job.id


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
    caller: Caller,
    *,
    idempotency_key: str | None = None,
    message: str | None = None,
) -> tuple[int, bool]:
    """Returns the job's id and whether this call created it (False: an earlier request with the same key
    did)."""
    if idempotency_key and (earlier := job_by_key(session, caller.user, idempotency_key)):
        return _replay(earlier, spec, idempotency_key), False
    plan = _plan(session, settings, spec, caller)
    check_quota(session, settings, caller.user, plan)
    job = Job(
        name=spec.name,
        owner=caller.user,
        status=JobStatus.QUEUED,
        spec=spec.model_dump(mode="json"),
        plan=plan.public(),
        total_gpus=plan.total_gpus,
        priority=spec.priority,
        idempotency_key=idempotency_key,
    )
    try:
        session.add(job)
        session.flush()  # gives the job its id, which the event names
        session.add(JobEvent(job_id=job.id, to_status=JobStatus.QUEUED, reason="submitted", message=message))
        session.commit()
    except IntegrityError:
        # A concurrent request with the same key committed first; answer as its replay.
        session.rollback()
        if idempotency_key and (earlier := job_by_key(session, caller.user, idempotency_key)):
            return _replay(earlier, spec, idempotency_key), False
        raise
    _ring(job.id)
    return job.id, True


def retry_job(session: Session, settings: Settings, job_id: int, caller: Caller) -> int:
    """A new job with the same spec, owned by the caller, and its id; the old one stays as it ended, for the
    record."""
    old = get_owned_job(session, job_id, caller)
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
    new_id, _ = submit_job(session, settings, spec, caller, message=f"retry of job {job_id}")
    return new_id

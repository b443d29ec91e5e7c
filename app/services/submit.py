"""Submitting a job: plan it against this cluster, store it, then ring the worker's doorbell."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Row, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.schemas import RetryFrom
from app.services.artifacts import owned_checkpoint
from app.services.code import check_code
from app.services.confine import check_checkpoint_path, check_data_root
from app.services.data_listing import list_store_data
from app.services.dependencies import unmet_dependencies
from app.services.errors import CheckpointNotFound, IdempotencyConflict, InvalidSpec, JobStateConflict
from app.services.factories import check_factories
from app.services.forecast_check import forecast_plan
from app.services.gpus import Cluster, read_cluster
from app.services.integrations.mlflow_exporter import check_tracking
from app.services.jobs import SHOWN_COLUMNS, check_priority, get_owned_job
from app.services.keys import Caller
from app.services.quotas import check_quota
from app.services.secrets import check_secret_refs
from app.services.shown import shown_plan
from app.services.stored_spec import revalidated, same_spec, stored_form
from core.config import Settings
from core.dependencies import catch_ended, record_dependencies
from core.doorbell import ring_soon
from core.executors import executor_traits
from core.launch import show_planned
from core.models import ApiKey, Base, Checkpoint, Job, JobEvent
from core.queue_order import JOBS
from core.sqlite_writers import writer_turn
from core.states import JobStatus
from jobspec.cluster import cluster_problems
from jobspec.datadir import absent_folders
from jobspec.hf_files import check_model_dir
from jobspec.plan import NO_HOSTS, Plan, resolve_plan
from jobspec.problems import Problem
from jobspec.spec import JobSpec
from jobspec.token_files import check_token_data

DRY_RUN_ID = "<job-id>"
RETRYABLE = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED})
# The submission's writes, on the tables themselves (Core): each statement built once.
_NEW_JOB = insert(JOBS).returning(JOBS.c.id)
# The submission's last write: it returns the job as it is shown, for the answer.
_PLANNED = (
    update(JOBS)
    .where(JOBS.c.id == bindparam("job_id"))
    .values(plan=bindparam("planned"))
    .returning(*SHOWN_COLUMNS)
)
_SUBMITTED = insert(Base.metadata.tables[JobEvent.__tablename__])
# Concurrent retries of one job race for its next generation: each round one of them takes it, and the
# others look again (and find it, unless they asked for another retry).
_RETRY_ROUNDS = 5


@dataclass(frozen=True)
class Submitted:
    """A submission's job, whether this call created it (False: an earlier request with the same key did),
    and, when it did, the job's row as GET shows it (app/services/jobs.py::SHOWN_COLUMNS)."""

    job_id: int
    created: bool
    shown: Row[Any] | None = None


@dataclass(frozen=True)
class RetryOf:
    """The job a retry is made from, and which retry of it this one is."""

    parent_id: int
    generation: int


def _resumed(
    session: Session, settings: Settings, checkpoint_id: int | None, caller: Caller
) -> Checkpoint | None:
    """Only the caller's own checkpoints (any, for an admin), and only files under the runs directory."""
    if checkpoint_id is None:
        return None
    try:
        checkpoint = owned_checkpoint(session, checkpoint_id, caller)
    except CheckpointNotFound as exc:
        raise InvalidSpec("checkpoint.resume_from", f"{exc}, and use one of their ids") from exc
    check_checkpoint_path(settings, "checkpoint.resume_from", checkpoint.path)
    return checkpoint


def check_environment(settings: Settings, name: str | None) -> None:
    if name is not None and name not in settings.environment_pythons:
        known = ", ".join(sorted(settings.environment_pythons)) or "none"
        raise InvalidSpec(
            "environment",
            f"no environment {name!r} is registered (registered: {known}); leave it out to use the "
            "worker's own, or ask the admin to add it to TRAINYARD_ENVIRONMENTS",
        )


def check_executor(settings: Settings, spec: JobSpec) -> None:
    """Where the executor's scheduler places jobs (Slurm), a spec cannot pin what it allocates."""
    traits = executor_traits(settings)
    if traits.places_jobs:
        return
    pinned = [name for name in ("host", "gpus") if getattr(spec.parallel, name)]
    for name in pinned[:1]:
        raise InvalidSpec(
            f"parallel.{name}",
            f"{traits.placed_by} chooses the nodes and GPUs of every job here (TRAINYARD_EXECUTOR="
            f"{traits.name}); leave it out and ask for a count: parallel.nnodes, parallel.num_gpus",
        )


def _check_files(settings: Settings, spec: JobSpec) -> None:
    """What the spec names under the data directory, as the disk holds it now. A program reads its data
    itself, from its bundle or the run directory."""
    if spec.program is None:
        check_data_root(settings, spec.inputs.data.root)
        check_token_data(spec, settings.data_dir)
        check_model_dir(spec.inputs.model, settings.data_dir)


def _plan(
    session: Session,
    settings: Settings,
    spec: JobSpec,
    caller: Caller,
    cluster: Cluster,
    *,
    check_files: bool = True,
    refuse_unfit: bool = True,
) -> tuple[Plan, Checkpoint | None]:
    """The plan of a spec whose fields passed their own checks, on the cluster the workers registered, and
    the checkpoint it resumes from; the checks around it need the disk or the database: a code bundle and a
    checkpoint the caller owns, the files under the data directory (unless `check_files` is off); and its
    forecast, which refuses a job that will not fit its GPU (unless `refuse_unfit` is off: a dry run)."""
    check_code(session, settings, spec, caller)
    check_factories(session, settings, spec, caller)
    check_priority(settings, spec.priority, caller)
    check_environment(settings, spec.environment)
    check_executor(settings, spec)
    check_tracking(settings, spec)
    check_secret_refs(session, settings, spec, caller)
    if check_files:
        _check_files(settings, spec)
    plan = forecast_plan(
        session, settings, spec, resolve_plan(spec, cluster.inventory), cluster, refuse=refuse_unfit
    )
    plan.data_found = list_store_data(session, settings, spec, caller)
    resumed = _resumed(session, settings, spec.checkpoint.resume_from, caller)
    plan.resume_path = None if resumed is None else resumed.path
    return plan, resumed


def _reason(problem: Problem) -> str:
    return f"{problem.field}: {problem.message}" + (f" ({problem.fix})" if problem.fix else "")


def dry_run(session: Session, settings: Settings, spec: JobSpec, caller: Caller) -> Plan:
    """The plan a submission would store, with the argv a worker would build for it (planned_argv), a
    placeholder for the id it does not have yet and the server's folders as their variables
    (services/shown.py). What may change before the submission is no refusal: a spec that no registered host
    could run (GPUs on a laptop), or whose folders are not under the data directory yet, is still planned,
    as the cluster would run it, with `runnable` false and why. Once the folders are there, a dry run judges
    their files as a submission does."""
    absent = absent_folders(spec, settings.data_dir)
    unmet_dependencies(session, spec, caller)
    cluster = read_cluster(session, settings)
    as_anywhere = replace(cluster, inventory=NO_HOSTS)
    plan, _ = _plan(session, settings, spec, caller, as_anywhere, check_files=not absent, refuse_unfit=False)
    unrunnable = [*absent, *cluster_problems(spec.parallel, cluster.inventory)]
    if unrunnable:
        plan.runnable = False
        plan.not_runnable_because += [_reason(problem) for problem in unrunnable]
    show_planned(plan, spec, settings, DRY_RUN_ID)
    return Plan.model_validate(shown_plan(plan.public(), settings))


def job_by_key(session: Session, owner: str, key: str) -> Job | None:
    # Keys are scoped per owner: one user's key never reveals or replays another user's job.
    return session.scalar(select(Job).where(Job.owner == owner, Job.idempotency_key == key))


def _replay(job: Job, spec: JobSpec, key: str) -> int:
    if not same_spec(job.spec, stored_form(spec)):
        raise IdempotencyConflict(key, job.id)
    return job.id


def submit_job(
    session: Session,
    settings: Settings,
    spec: JobSpec,
    caller: Caller,
    *,
    idempotency_key: str | None = None,
    message: str | None = None,
    retry: RetryOf | None = None,
    requested_by: str | None = None,
) -> Submitted:
    """The job is the caller's, and `requested_by` (default: the caller) who asked for it. Its parent is
    the one it retries, else the one whose checkpoint it resumes from. It waits for those of its depends_on
    that have not ended yet (core/dependencies.py)."""
    if idempotency_key and (earlier := job_by_key(session, caller.user, idempotency_key)):
        return Submitted(_replay(earlier, spec, idempotency_key), created=False)
    unmet = unmet_dependencies(session, spec, caller)
    plan, resumed = _plan(session, settings, spec, caller, read_cluster(session, settings))
    check_quota(session, settings, caller.user, plan)
    resumed_job = spec.checkpoint.resume_from_job if resumed is None else resumed.job_id
    parent_id = retry.parent_id if retry else resumed_job
    stored = {
        "name": spec.name,
        "owner": caller.user,
        "status": JobStatus.QUEUED,
        "spec": stored_form(spec),
        "plan": plan.public(),
        "total_gpus": plan.total_gpus,
        "priority": spec.priority,
        "idempotency_key": idempotency_key,
        "parent_id": parent_id,
        "retry_generation": retry.generation if retry else None,
        "requested_by": requested_by or caller.user,
    }
    try:
        # Core statements on the session's connection, not ORM objects: the unit of work's states and flushes,
        # and the ORM's execution path, cost more than the writes.
        connection = session.connection()
        with writer_turn(connection):
            job_id = connection.execute(_NEW_JOB, stored).scalar_one()
            record_dependencies(session, job_id, unmet)
            submitted = {"reason": "submitted", "message": message}
            event = {"job_id": job_id, "to_status": JobStatus.QUEUED, **submitted}
            connection.execute(_SUBMITTED, event)
            show_planned(plan, spec, settings, job_id)  # the planned argv names the id just given
            shown = connection.execute(_PLANNED, {"job_id": job_id, "planned": plan.public()}).one()
            session.commit()
    except IntegrityError:
        # A concurrent request with the same key committed first; answer as its replay. (A retry that lost
        # the race for its generation has no key, or another: it looks again.)
        session.rollback()
        if idempotency_key and (earlier := job_by_key(session, caller.user, idempotency_key)):
            return Submitted(_replay(earlier, spec, idempotency_key), created=False)
        raise
    catch_ended(unmet)
    ring_soon(job_id)
    return Submitted(job_id, created=True, shown=shown)


def _retryable(session: Session, job_id: int, caller: Caller) -> Job:
    job = get_owned_job(session, job_id, caller)
    status = JobStatus(job.status)
    if status not in RETRYABLE:
        fix = (
            "submit its spec again with POST /v1/jobs to run it once more"
            if status is JobStatus.SUCCEEDED
            else "only failed, timed_out or cancelled jobs can be retried; wait for it to end or cancel it"
        )
        raise JobStateConflict(job_id, status, fix)
    return job


def _latest_checkpoint(session: Session, job_id: int) -> int | None:
    """The checkpoint a restart of the job would resume from (pruned ones have no row)."""
    query = select(Checkpoint.id).where(Checkpoint.job_id == job_id)
    return session.scalar(query.order_by(Checkpoint.step.desc(), Checkpoint.id.desc()).limit(1))


def _retry_spec(session: Session, job: Job, start: RetryFrom) -> tuple[JobSpec, str]:
    """The spec a retry runs, and how it starts, for the new job's first event."""
    latest = None if start is RetryFrom.SCRATCH else _latest_checkpoint(session, job.id)
    resumed = {"checkpoint": {**job.spec.get("checkpoint", {}), "resume_from": latest}}
    try:
        spec = revalidated(job.spec if latest is None else job.spec | resumed)
    except ValidationError as exc:
        raise InvalidSpec(
            "spec", f"job {job.id}'s spec no longer validates ({exc}); submit a fixed one"
        ) from exc
    return spec, f"retry of job {job.id}" + ("" if latest is None else f" from its checkpoint {latest}")


def _owner(session: Session, job: Job, caller: Caller) -> Caller:
    """Who a job made from `job` belongs to: its owner, with the owner's own rights, whoever asks. An admin's
    retry of a user's job is the user's: theirs to see, and counted against their quota and fair share."""
    if job.owner == caller.user:
        return caller
    admin = select(ApiKey.id).where(ApiKey.user == job.owner, ApiKey.is_admin).limit(1)
    return Caller(job.owner, is_admin=session.scalar(admin) is not None)


def _retries(session: Session, job_id: int) -> list[Job]:
    query = select(Job).where(Job.parent_id == job_id, Job.retry_generation.is_not(None))
    return list(session.scalars(query.order_by(Job.retry_generation.desc())))


def retry_job(
    session: Session,
    settings: Settings,
    job_id: int,
    caller: Caller,
    *,
    start: RetryFrom = RetryFrom.LATEST,
    again: bool = False,
    idempotency_key: str | None = None,
) -> Submitted:
    """A new job, owned by the job's owner (whoever asks: the caller is recorded as requested_by), that runs
    a failed, timed-out or cancelled job's spec again, from that job's latest checkpoint unless `start` says
    scratch; the old one stays as it ended, for the record. A retry that the caller can see with the same
    spec is answered again rather than made twice, unless `again` is set or a new Idempotency-Key sent."""
    job = _retryable(session, job_id, caller)
    spec, message = _retry_spec(session, job, start)
    owner = _owner(session, job, caller)
    if owner.user != caller.user:
        message += f", asked by {caller.user}"
    wanted = stored_form(spec)
    for _ in range(_RETRY_ROUNDS):
        parent = _retryable(session, job_id, caller)  # deleted meanwhile: answered as missing
        retries = _retries(session, parent.id)
        same = next((r for r in retries if same_spec(r.spec, wanted) and caller.may_see(r.owner)), None)
        if same is not None and not (again or idempotency_key):
            return Submitted(same.id, created=False)
        generation = 1 + max((job.retry_generation for job in retries if job.retry_generation), default=0)
        try:
            return submit_job(
                session,
                settings,
                spec,
                owner,
                idempotency_key=idempotency_key,
                message=message,
                retry=RetryOf(parent.id, generation),
                requested_by=caller.user,
            )
        except IntegrityError:
            continue
    raise JobStateConflict(
        job_id, JobStatus(parent.status), "it was being retried by others at the same time; try again"
    )

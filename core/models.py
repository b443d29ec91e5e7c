"""SQL tables. The database is the source of truth for every job; the broker is only a doorbell."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    DDL,
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    event,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# as_utc sits beside utcnow for the code that reads these tables' times; core.clock has no SQLAlchemy, for the
# CLI's schemas.
from core.clock import as_utc as as_utc
from core.states import TERMINAL, JobStatus


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[int]: JSON,
        list[dict[str, Any]]: JSON,
    }


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(128), default="local", index=True)
    status: Mapped[JobStatus] = mapped_column(String(16), default=JobStatus.QUEUED, index=True)
    status_reason: Mapped[str | None] = mapped_column(String(64))
    message: Mapped[str | None] = mapped_column(Text)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    # The plan's total_gpus, stored at submission so the GPU quota sums a column rather than parsing plans.
    total_gpus: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    idempotency_key: Mapped[str | None] = mapped_column(String(128))
    # The job this one was made from: the one it retries, or the one whose checkpoint it resumes from.
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="SET NULL", name="fk_jobs_parent")
    )
    # Which retry of the parent this is (1, 2, ...); null for any other job. Unique per parent, so concurrent
    # retries of one job make one child, and another only when asked for.
    retry_generation: Mapped[int | None] = mapped_column(Integer)
    # Who asked for the job: its owner, or an admin who retried the owner's job (which stays the owner's).
    # Null for jobs made before it was recorded.
    requested_by: Mapped[str | None] = mapped_column(String(128))
    host: Mapped[str | None] = mapped_column(String(255))
    gpu_ids: Mapped[list[int] | None] = mapped_column(JSON)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    progress_step: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int | None] = mapped_column(Integer)
    latest_metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    running_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The current attempt's start-up: {"attempt": n, "marks": {mark: epoch seconds}} (jobspec/startup.py);
    # null until a worker claims the job.
    timings: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # A sweep's trial: its sweep and its number there (core/sweeps/); null for any other job. Unique, so
    # asking for a sweep's next trial twice never makes two jobs of it.
    sweep_id: Mapped[int | None] = mapped_column(ForeignKey("sweeps.id", name="fk_jobs_sweep"), index=True)
    trial: Mapped[int | None] = mapped_column(Integer)
    # Handed to Slurm (TRAINYARD_EXECUTOR=slurm): its Slurm job id, and Slurm's restart count of it that the
    # current attempt runs as (worker/slurm/follow.py); null for a job no Slurm ever saw.
    slurm_job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    slurm_restarts: Mapped[int | None] = mapped_column(Integer)
    # Its spec's depends_on not succeeded yet: placement passes over a job while this is above 0
    # (core/dependencies.py).
    waiting_on: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Some job depends on this one; then its end sets dependants_due in the same UPDATE (core/transitions.py),
    # and the dependencies' reconciler releases or cancels the dependants and clears it.
    has_dependants: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    dependants_due: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0", index=True)

    __table_args__ = (
        UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency"),
        UniqueConstraint("parent_id", "retry_generation", name="uq_jobs_parent_retry"),
        UniqueConstraint("sweep_id", "trial", name="uq_jobs_sweep_trial"),
        # Without AUTOINCREMENT SQLite hands the newest deleted job's id to the next one, which would then be
        # taken for the deleted job in paths, links and logs.
        {"sqlite_autoincrement": True},
    )


class JobDependency(Base):
    """A dependency of a queued job not settled yet: deleted once its job (depends_on_id) has ended and the
    dependant was released (one fewer waiting_on) or cancelled. A dependency met at submission has no row."""

    __tablename__ = "job_dependencies"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    depends_on_id: Mapped[int] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class JobEvent(Base):
    """One row per state transition."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(64))
    message: Mapped[str | None] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class JobStacks(Base):
    """A job's latest capture of its ranks' stacks (worker/attempts/stack_capture.py), bounded per rank and in
    ranks, and a capture asked for (POST /v1/jobs/{id}/stacks) that the worker running the job has yet to
    take."""

    __tablename__ = "job_stacks"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    captured_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    reason: Mapped[str | None] = mapped_column(String(32))  # "requested" or "stalled"
    ranks: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)  # [{rank, host, stack}]
    collectives: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)  # flight recorder's
    message: Mapped[str | None] = mapped_column(Text)  # what the capture could not read, and why


class Metric(Base):
    """A reduced value at an optimizer step; the primary key makes re-tailing an event file harmless."""

    __tablename__ = "metrics"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Checkpoint(Base):
    __tablename__ = "checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(Text)  # an absolute path, or an s3:// URI with artifact_store=s3
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    # Of the file's bytes as the trainer wrote them: resumes and downloads refuse a file that differs. None
    # for checkpoints recorded before checksums.
    sha256: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (
        UniqueConstraint("job_id", "path", name="uq_checkpoints_job_path"),
        # A deleted checkpoint's id, named in a later spec's resume_from, must never name another's file.
        {"sqlite_autoincrement": True},
    )


class GpuLease(Base):
    """The primary key is the guarantee that no GPU is ever held by two jobs."""

    __tablename__ = "gpu_leases"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    leased_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class JobNode(Base):
    """One host's part of a job's attempt. Node 0 hosts the rendezvous; every node's supervisor heartbeats
    its own row, so a host that goes quiet is noticed even while the others keep the job's heartbeat fresh."""

    __tablename__ = "job_nodes"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    node_rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(255), index=True)
    address: Mapped[str] = mapped_column(String(255))  # where the other nodes reach this host
    gpu_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    rdzv_port: Mapped[int | None] = mapped_column(Integer)  # node 0 only, once its torchrun is starting
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    launched: Mapped[bool] = mapped_column(Boolean, default=False)  # its torchrun started: never twice
    finished: Mapped[bool] = mapped_column(Boolean, default=False)  # its torchrun exited 0


class LostAttempt(Base):
    """An attempt whose worker was lost, on one of its hosts: what its processes still run there is to be
    stopped, and what they wrote recorded. The row is written with the job's requeue (or cancel) and deleted
    by that host's reaper once both are done, so a reaper that dies halfway leaves the work to the next one:
    a job cancelled while it waits requeued has no next attempt that would catch its events up."""

    __tablename__ = "lost_attempts"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True)


class Worker(Base):
    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)  # "<host>:<pid>"
    host: Mapped[str] = mapped_column(String(255), index=True)
    address: Mapped[str] = mapped_column(String(255), default="127.0.0.1")
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    cpus: Mapped[int | None] = mapped_column(Integer)  # the cores it may use; None: a worker from before 0008
    # Its host's memory, which a CPU job's ranks share; None: a worker from before 0021.
    memory_mb: Mapped[int | None] = mapped_column(Integer)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class UserUsage(Base):
    """A user's recent use of the cluster for fair share (core/usage.py): GPU-seconds and CPU-core-seconds,
    each halved every fair_share_half_life_s, as they stood at `as_of`."""

    __tablename__ = "user_usage"

    owner: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu_seconds: Mapped[float] = mapped_column(Float)
    cpu_core_seconds: Mapped[float] = mapped_column(Float)
    as_of: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # log2 of the weighted use plus as_of in half-lives: all users decay alike, so this orders them as their
    # use does now, at any later time, without the queue's ORDER BY computing a decay.
    share_key: Mapped[float] = mapped_column(Float)


class ApiKey(Base):
    """A bearer token, stored only as its SHA-256: the plaintext is shown once, when it is created."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(128), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CodeBundle(Base):
    """A user's code bundle (core/code_store.py holds its files). The id is the sha256 of the archive, so two
    users who push the same bytes share the files and each has a row: neither sees, blocks or deletes the
    other's."""

    __tablename__ = "code_bundles"

    id: Mapped[str] = mapped_column(String(71), primary_key=True)  # "sha256:" and 64 hex digits
    owner: Mapped[str] = mapped_column(String(128), primary_key=True, index=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)  # the archive; + unpacked_bytes: what the quota sums
    unpacked_bytes: Mapped[int] = mapped_column(BigInteger)
    file_count: Mapped[int] = mapped_column(Integer)
    files: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)  # {path, size}, the first 1000
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


Index("ix_jobs_queue", Job.status, Job.priority, Job.id)
# The few jobs waiting for their depends_on, which GET /v1/queue places among those in line, found without
# reading the queue.
Index(
    "ix_jobs_waiting",
    Job.waiting_on,
    sqlite_where=Job.waiting_on > 0,
    postgresql_where=Job.waiting_on > 0,
)


# BIGINT on PostgreSQL: the outbox gains a row per transition per webhook. SQLite's AUTOINCREMENT takes only
# INTEGER, which is 64-bit there.
_BIG_ID = BigInteger().with_variant(Integer(), "sqlite")


class Webhook(Base):
    """A user's subscription to their jobs' state changes (an admin's with all_users: every job's). The
    secret signs each delivery, so it is stored as given; the API never shows it after creation."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(_BIG_ID, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(128), index=True)
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[str]] = mapped_column(JSON)  # "job.<status>" names, or ["*"]
    secret: Mapped[str] = mapped_column(String(256))
    all_users: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = ({"sqlite_autoincrement": True},)


class WebhookDelivery(Base):
    """One event for one webhook: the outbox row written in the transition's transaction
    (core/integrations/webhook_outbox.py), then claimed and sent until a 2xx or the deadline. No foreign key
    to the job: a deleted job's history of deliveries stays."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(_BIG_ID, primary_key=True, autoincrement=True)
    webhook_id: Mapped[int] = mapped_column(_BIG_ID, ForeignKey("webhooks.id", ondelete="CASCADE"))
    job_id: Mapped[int] = mapped_column(Integer)
    event: Mapped[str] = mapped_column(String(32))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))  # when the job moved
    status: Mapped[str] = mapped_column(String(16))  # core.integrations.webhook_outbox.DeliveryStatus
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Due time while pending; while a sender holds the row, the end of its claim.
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    response_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_webhook_deliveries_webhook_id", "webhook_id", "id"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        {"sqlite_autoincrement": True},
    )


class Sweep(Base):
    """A hyperparameter search whose trials are jobs (core/sweeps/). `config` is the request as given
    (core.sweeps.spec.SweepSpec); Optuna's study is rebuilt from these rows, never stored elsewhere."""

    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(128), index=True)
    status: Mapped[str] = mapped_column(String(16), default="running")  # core.states.SweepStatus
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    # A trial ended (or the sweep was made) and what follows is not asked for yet: set by the change, in its
    # transaction; cleared by the sweeps' reconciler once it has asked (migration 0019).
    trials_due: Mapped[bool] = mapped_column(Boolean, default=True, server_default="0", index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = ({"sqlite_autoincrement": True},)


class SweepTrial(Base):
    """One of a sweep's trials, made in the transaction that makes its job (jobs.sweep_id, jobs.trial) and
    told its end in the transaction that ends the job (core/sweeps/told.py). It outlives the job, should the
    job be deleted."""

    __tablename__ = "sweep_trials"

    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int | None] = mapped_column(Integer)  # no foreign key: kept once the job is deleted
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    # What the sampler and the pruner keep on an Optuna trial (the grid point, ASHA's rungs), for the rebuild.
    system_attrs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(16), default="running")  # core.states.TrialState
    value: Mapped[float | None] = mapped_column(Float)  # the objective's last report, once completed
    # Why it ended, or, while it runs, the pruner's verdict that it stop (kept for a restarted attempt).
    message: Mapped[str | None] = mapped_column(Text)
    judged_step: Mapped[int | None] = mapped_column(Integer)  # the last report the pruner judged
    steps: Mapped[int | None] = mapped_column(Integer)  # at its end: steps run, and those it was to run
    total_steps: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class MlflowExport(Base):
    """A job exported to MLflow as a run (core/integrations/mlflow_outbox.py): made when the exporter first
    sees a job that asks for it, then claimed pass after pass until the run holds every metric row and the
    job's end. `exported_through` is the watermark that keeps a point from being sent twice."""

    __tablename__ = "mlflow_exports"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    # Tags the run, so that a creation whose answer was lost finds the run it made instead of a second one.
    token: Mapped[str] = mapped_column(String(32))
    experiment_id: Mapped[str | None] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(String(64))
    # {metric name: the last step sent}: a job's rows of one name arrive in step order.
    exported_through: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    checkpoint_logged: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    done: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # Due time while pending; while an exporter holds the row, the end of its claim.
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # claims, ever
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # in a row, for the backoff
    last_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_mlflow_exports_due", "done", "next_attempt_at"),)


class MlflowCursor(Base):
    """One row: every job up to `job_id` has been looked at by the exporter (and given an MlflowExport row if
    it asks for one), so each pass reads only the jobs submitted since."""

    __tablename__ = "mlflow_cursor"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(Integer)


class Secret(Base):
    """A user's secret, sealed with AES-GCM under TRAINYARD_SECRETS_KEY (core/secrets.py): the plain value is
    never stored. An admin's `shared` one may be named by every user's jobs."""

    __tablename__ = "secrets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(64))
    shared: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    sealed: Mapped[bytes] = mapped_column(LargeBinary)  # a 12-byte nonce, then the ciphertext and its tag
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("owner", "name", name="uq_secrets_owner_name"),
        Index("ix_secrets_shared_name", "shared", "name"),
        {"sqlite_autoincrement": True},
    )


class JobSecretValue(Base):
    """A secret's value as a launch of the job handed it to the ranks, sealed as secrets are
    (core/secrets.py::record_launched): the API masks the job's logs with these, so a secret deleted or
    replaced later is still masked in what the job printed. At most jobspec.spec_env.MAX_ENV per job."""

    __tablename__ = "job_secret_values"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    sealed: Mapped[bytes] = mapped_column(LargeBinary)  # a 12-byte nonce, then the ciphertext and its tag

    __table_args__ = ({"sqlite_autoincrement": True},)


class GpuHealth(Base):
    """A GPU that is not ok (core/gpu_health.py): `drained`, nothing new is placed on it and its job is
    requeued elsewhere, or `degraded`, placed but shown. No row: ok."""

    __tablename__ = "gpu_health"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[str] = mapped_column(String(16))  # core.gpu_health.GpuState
    reason: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16))  # core.gpu_health.HealthSource: who judged it
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class GpuJobFault(Base):
    """How often a job's attempts failed with a device error (worker/failure.py) on one GPU: at the second,
    the GPU is degraded and the job's next attempt is placed elsewhere."""

    __tablename__ = "gpu_job_faults"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)


class OwnerUnfinished(Base):
    """A user's unfinished jobs and the GPUs they ask for, what the quotas count (core/quotas.py): kept by the
    triggers below on the jobs table, whoever changes a job (API, worker, reaper, a deletion), so a submission
    reads one row where a count over the user's unfinished jobs grew with their queue. Defined here, with the
    jobs table, so that every schema made by create_all has them; the migration 0028 makes the same."""

    __tablename__ = "owner_unfinished"

    owner: Mapped[str] = mapped_column(String(128), primary_key=True)
    jobs: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[int] = mapped_column(Integer)


# OwnerUnfinished's triggers. A job counts while its status is not terminal; a change of status, owner or GPUs
# moves its count.
_ENDED = "(" + ", ".join(f"'{status}'" for status in sorted(TERMINAL)) + ")"
_ADD = """INSERT INTO owner_unfinished (owner, jobs, gpus) SELECT NEW.owner, 1, NEW.total_gpus WHERE {when}
    ON CONFLICT (owner) DO UPDATE SET jobs = owner_unfinished.jobs + 1,
    gpus = owner_unfinished.gpus + excluded.gpus;"""
_TAKE = """UPDATE owner_unfinished SET jobs = jobs - 1, gpus = gpus - OLD.total_gpus
    WHERE owner = OLD.owner AND {when};"""
_MOVED = "OLD.owner IS NOT NEW.owner OR OLD.total_gpus IS NOT NEW.total_gpus"
_UNFINISHED_SQLITE_TRIGGERS = (
    f"""CREATE TRIGGER unfinished_insert AFTER INSERT ON jobs WHEN NEW.status NOT IN {_ENDED}
    BEGIN {_ADD.format(when="1")} END""",
    f"""CREATE TRIGGER unfinished_update AFTER UPDATE OF status, owner, total_gpus ON jobs
    WHEN (OLD.status NOT IN {_ENDED}) IS NOT (NEW.status NOT IN {_ENDED}) OR {_MOVED}
    BEGIN {_TAKE.format(when=f"OLD.status NOT IN {_ENDED}")} {_ADD.format(when=f"NEW.status NOT IN {_ENDED}")}
    END""",
    f"""CREATE TRIGGER unfinished_delete AFTER DELETE ON jobs WHEN OLD.status NOT IN {_ENDED}
    BEGIN {_TAKE.format(when="1")} END""",
)
_UNFINISHED_POSTGRES_TRIGGERS = (
    f"""CREATE FUNCTION count_unfinished() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'INSERT' THEN {_TAKE.format(when=f"OLD.status NOT IN {_ENDED}")} END IF;
        IF TG_OP <> 'DELETE' THEN {_ADD.format(when=f"NEW.status NOT IN {_ENDED}")} END IF;
        RETURN NULL;
    END $$""",
    f"""CREATE TRIGGER unfinished_insert AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.status NOT IN {_ENDED}) EXECUTE FUNCTION count_unfinished()""",
    f"""CREATE TRIGGER unfinished_update AFTER UPDATE OF status, owner, total_gpus ON jobs FOR EACH ROW
    WHEN ((OLD.status NOT IN {_ENDED}) IS DISTINCT FROM (NEW.status NOT IN {_ENDED})
    OR {_MOVED.replace("IS NOT", "IS DISTINCT FROM")}) EXECUTE FUNCTION count_unfinished()""",
    f"""CREATE TRIGGER unfinished_delete AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.status NOT IN {_ENDED}) EXECUTE FUNCTION count_unfinished()""",
)
# The changes of the last KEPT_CHANGES versions: an index further behind reads the whole queue again.
KEPT_CHANGES = 1000


class QueueChange(Base):
    """A change to the queue (a job that enters or leaves it, changes priority while in it, or starts or stops
    waiting for its depends_on), numbered in commit order and written by the triggers below on the jobs table
    whoever makes the change: the API's index of the queue (app/services/queue_index.py) reads only the rows
    after the last it applied (core/queue_order.py)."""

    __tablename__ = "queue_changes"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    job_id: Mapped[int] = mapped_column(Integer)


# SQLite runs one writer at a time, so max + 1 numbers the changes in the order they commit.
_QUEUE_LOG = f"""INSERT INTO queue_changes (version, job_id) SELECT coalesce(max(version), 0) + 1, {{row}}.id
    FROM queue_changes;
    DELETE FROM queue_changes WHERE version <= (SELECT max(version) FROM queue_changes) - {KEPT_CHANGES};"""
_QUEUE_SQLITE_TRIGGERS = (
    f"""CREATE TRIGGER queue_change_insert AFTER INSERT ON jobs WHEN NEW.status = 'queued'
    BEGIN {_QUEUE_LOG.format(row="NEW")} END""",
    f"""CREATE TRIGGER queue_change_update AFTER UPDATE OF status, priority, waiting_on ON jobs
    WHEN (OLD.status = 'queued' OR NEW.status = 'queued')
    AND (OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority
    OR OLD.waiting_on IS NOT NEW.waiting_on)
    BEGIN {_QUEUE_LOG.format(row="NEW")} END""",
    f"""CREATE TRIGGER queue_change_delete AFTER DELETE ON jobs WHEN OLD.status = 'queued'
    BEGIN {_QUEUE_LOG.format(row="OLD")} END""",
)
# PostgreSQL commits concurrently: the table lock, held to the commit, lets one queue change commit at a time,
# so that versions still follow commit order and a reader that saw a version has seen every one before it.
_QUEUE_POSTGRES_TRIGGERS = (
    f"""CREATE FUNCTION queue_change() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE changed integer;
    BEGIN
        IF TG_OP = 'DELETE' THEN changed := OLD.id; ELSE changed := NEW.id; END IF;
        LOCK TABLE queue_changes IN EXCLUSIVE MODE;
        INSERT INTO queue_changes (version, job_id)
            SELECT coalesce(max(version), 0) + 1, changed FROM queue_changes;
        DELETE FROM queue_changes WHERE version <= (SELECT max(version) FROM queue_changes) - {KEPT_CHANGES};
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER queue_change_insert AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.status = 'queued') EXECUTE FUNCTION queue_change()""",
    """CREATE TRIGGER queue_change_update AFTER UPDATE OF status, priority, waiting_on ON jobs FOR EACH ROW
    WHEN ((OLD.status = 'queued' OR NEW.status = 'queued')
    AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.priority IS DISTINCT FROM NEW.priority
    OR OLD.waiting_on IS DISTINCT FROM NEW.waiting_on))
    EXECUTE FUNCTION queue_change()""",
    """CREATE TRIGGER queue_change_delete AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.status = 'queued') EXECUTE FUNCTION queue_change()""",
)


# A schema made by create_all (the unit tests, scripts) gets the triggers a migrated one has.
_TRIGGERS = {
    "sqlite": (*_UNFINISHED_SQLITE_TRIGGERS, *_QUEUE_SQLITE_TRIGGERS),
    "postgresql": (*_UNFINISHED_POSTGRES_TRIGGERS, *_QUEUE_POSTGRES_TRIGGERS),
}
for _dialect, _statements in _TRIGGERS.items():
    for _statement in _statements:
        event.listen(Base.metadata, "after_create", DDL(_statement).execute_if(dialect=_dialect))

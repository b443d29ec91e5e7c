"""Request and response bodies: one family per entity, named like the template (XPublic, XsPublic)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.retry_from import RetryFrom as RetryFrom
from app.timings import JobTimings
from core.clock import as_utc
from core.integrations.webhook_events import EVENT_NAMES, unknown_events
from core.states import JobStatus
from core.users import USER_PATTERN, check_user
from jobspec.plan import Plan

UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


class FieldError(BaseModel):
    field: str = Field(description="the dotted path of the input to change, e.g. parallel.split_at")
    message: str = Field(description="what is wrong with it, and the fix")
    fix: str | None = Field(None, description="the fix alone, where the planner named it")


class Problem(BaseModel):
    """RFC 9457 problem details, the body of every error response."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None


class JobProgress(BaseModel):
    step: int
    total: int | None
    eta_s: float | None = Field(description="seconds left at the rate seen since the job began running")


class JobPublic(BaseModel):
    id: int
    name: str
    status: JobStatus
    status_reason: str | None
    message: str | None
    attempt: int
    priority: int
    owner: str = Field(description="whose job it is: the user of the key that submitted it")
    parent_id: int | None = Field(
        description="the job this one was made from: the one it retries, or the one whose checkpoint it "
        "resumes from; null for a fresh job, or once that job is deleted"
    )
    requested_by: str | None = Field(
        description="who asked for the job: its owner, or an admin who retried the owner's job; null for "
        "jobs made before this was recorded"
    )
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    running_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    host: str | None
    gpu_ids: list[int] | None
    queue_position: int | None = Field(description="1 = next to start; null unless queued")
    progress: JobProgress
    latest_metrics: dict[str, Any]
    timings: JobTimings | None = Field(description="the current attempt's start-up; null until claimed")
    spec: dict[str, Any] = Field(
        description="the spec as submitted: the fields written (a retry's checkpoint.resume_from too), "
        "without defaults; the plan holds what they resolved to"
    )
    plan: dict[str, Any] = Field(
        description="what the worker runs: world size, per-rank batch, argv; its forecast, with the peak "
        "memory and step time the job measured (from latest_metrics) once it reports them"
    )
    sweep_id: int | None = Field(None, description="the sweep this job is a trial of; null for other jobs")
    trial: int | None = Field(None, description="its trial's number in that sweep")
    slurm_job_id: int | None = Field(
        None, description="its Slurm job id, once handed to Slurm (TRAINYARD_EXECUTOR=slurm); null otherwise"
    )


class JobSubmitted(BaseModel):
    job: JobPublic | None = Field(description="null for a dry run")
    plan: Plan


class JobsPublic(BaseModel):
    data: list[JobPublic]
    next_cursor: int | None = Field(description="pass as ?cursor= for the next page; null on the last")


class SpecDifference(BaseModel):
    field: str = Field(description="a dotted path in the spec (train.lr), or plan.<name>: what was planned")
    label: str = Field(description="a short name: the path's last part, unless two differing fields share it")
    values: list[str] = Field(description="each job's value as text, in the order asked; '-' where unset")


class ComparedJob(BaseModel):
    id: int
    name: str
    differs: str = Field(description="its values of the fields that differ, e.g. 'lr 0.1, strategy ddp'")


class SpecDiff(BaseModel):
    """GET /v1/compare: where the jobs' specs and plans differ; fields alike in every job are left out."""

    jobs: list[ComparedJob]
    differences: list[SpecDifference]
    summary: str = Field(description="e.g. 'lr 0.1 vs 0.05, strategy ddp vs single'")


class JobEventPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    from_status: JobStatus | None
    to_status: JobStatus
    reason: str | None
    message: str | None
    attempt: int
    at: UtcDatetime


class JobEventsPublic(BaseModel):
    data: list[JobEventPublic]


class MetricPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    step: int
    epoch: int
    value: float
    at: UtcDatetime


class StreamEnd(BaseModel):
    """The last event of a metrics stream (`event: end`)."""

    status: JobStatus | Literal["deleted"] = Field(
        description="the job's terminal status, or deleted: the job was deleted while streaming"
    )
    message: str | None


class MetricsPublic(BaseModel):
    data: list[MetricPublic]
    next_after_step: int | None = Field(
        description="pass as ?after_step= for the next page; null on the last"
    )


class CheckpointPublic(BaseModel):
    id: int
    job_id: int
    step: int
    epoch: int
    size_bytes: int
    created_at: UtcDatetime
    download_url: str


class CheckpointsPublic(BaseModel):
    data: list[CheckpointPublic]


class LogChunk(BaseModel):
    rank: int | None = Field(description="null: the launcher's log")
    offset: int
    next_offset: int = Field(description="pass as ?offset= to read on")
    text: str
    eof: bool = Field(description="the job has finished and there is nothing more to read")


class RankStack(BaseModel):
    rank: int
    host: str
    stack: str = Field(description="every thread's Python stack (faulthandler's dump); the end of a long one")


class StacksPublic(BaseModel):
    captured_at: datetime
    reason: str | None = Field(description="requested (POST /v1/jobs/{id}/stacks) or stalled")
    ranks: list[RankStack]
    collectives: list[dict[str, Any]] = Field(
        description="NCCL jobs: {pg, seq, collective, waiting, missing} per process group, from torch's "
        "flight recorder where the ranks dumped it"
    )
    message: str | None = Field(None, description="what the capture could not read, and why")
    requested_at: datetime | None = Field(None, description="the latest capture asked for")


GpuHealthState = Literal["ok", "degraded", "drained"]


class GpuPublic(BaseModel):
    """A GPU as its worker reported it (utilisation and memory fields pass through), plus who holds it."""

    model_config = ConfigDict(extra="allow")

    index: int
    name: str | None = None
    memory_total_mb: int | None = None
    job_id: int | None = Field(None, description="the job holding a lease on this GPU")
    health: GpuHealthState = Field(
        "ok", description="drained: nothing new is placed on it and its job is requeued; degraded: shown only"
    )
    health_reason: str | None = Field(None, description="why it is not ok, and who said so")


class GpuDrain(BaseModel):
    """POST /v1/gpus/{host}/{index}/drain."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=500, description="why, for everyone who lists the GPUs")


class GpuHealthChanged(BaseModel):
    host: str
    index: int
    health: GpuHealthState
    health_reason: str | None
    jobs_stopped: list[int] = Field(
        description="running jobs on it asked to stop at their next checkpoint and requeued elsewhere"
    )


class HostGpus(BaseModel):
    host: str
    address: str = Field(description="where the other hosts reach it (a multi-host job's rendezvous)")
    status: Literal["up", "down"] = Field(description="down: its worker stopped heartbeating")
    worker_id: str
    heartbeat_at: UtcDatetime
    gpus: list[GpuPublic]


class HostsPublic(BaseModel):
    data: list[HostGpus] = Field(description="every host a worker registered, up or down; empty until then")


class Health(BaseModel):
    status: str
    database: str


class JobUpdate(BaseModel):
    """PATCH /v1/jobs/{id}: what may change while the job waits in the queue."""

    model_config = ConfigDict(extra="forbid")

    # strict: the document says integer, and lax mode would take `true` as priority 1.
    priority: int = Field(
        ge=-100, le=100, strict=True, description="higher starts first; same bounds as spec.priority"
    )


class QueueEntry(BaseModel):
    position: int = Field(description="1 = next to start")
    job_id: int
    name: str
    owner: str
    priority: int
    wants: str = Field(description="the GPUs or CPU cores the job waits for")
    status_reason: str | None
    reason: str = Field(description="why it waits, as the worker last wrote it")
    created_at: UtcDatetime
    starts_in_s: float | None = Field(
        None,
        description=(
            "seconds until it would start if the running jobs and those ahead run as long as forecast "
            "(an estimate: no backfill, no preemption); null with starts_in_note saying why"
        ),
    )
    starts_in_note: str | None = Field(None, description="why starts_in_s is null")


class QueuePublic(BaseModel):
    data: list[QueueEntry] = Field(description="queued jobs in the order workers start them")
    fair_share: str | None = Field(
        None, description="how recent use orders users' jobs of equal priority, when it orders any"
    )


class UsagePublic(BaseModel):
    user: str
    gpu_hours: float = Field(description="GPU-hours, each counting half per fair_share_half_life_s since")
    cpu_core_hours: float = Field(description="the same for CPU cores of jobs that run on CPU")


class UsagesPublic(BaseModel):
    data: list[UsagePublic] = Field(description="least used first: the order fair share starts them in")
    half_life_h: float


# The rule is documented as a pattern and checked by check_user, whose message says what a valid name is.
UserName = Annotated[
    str,
    AfterValidator(check_user),
    Field(json_schema_extra={"pattern": USER_PATTERN}, description="who the key acts as; owns their jobs"),
]


class KeyCreate(BaseModel):
    """POST /v1/keys (admins only): a new API key for `user`."""

    model_config = ConfigDict(extra="forbid")

    user: UserName
    admin: bool = Field(False, strict=True, description="sees every user's jobs and creates keys")


class KeyCreated(BaseModel):
    user: str
    admin: bool
    token: str = Field(description="send as 'Authorization: Bearer <token>'; shown this once, never stored")


class KeyPublic(BaseModel):
    """A stored key: who holds it, never its token (only a hash is kept)."""

    id: int
    user: str
    admin: bool
    created_at: UtcDatetime


class KeysPublic(BaseModel):
    data: list[KeyPublic] = Field(description="the caller's keys (an admin's: every key), oldest first")


class CodeFile(BaseModel):
    path: str = Field(description="inside the bundle, as a module path's folders")
    size: int = Field(description="bytes")


class CodeBundlePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str = Field(description="sha256:<hex> of the archive; what a spec's `code` names")
    owner: str
    size_bytes: int = Field(description="the archive as uploaded, kept to unpack on other hosts")
    unpacked_bytes: int = Field(
        description="what its files and folders take on disk: each file in whole 4 KiB blocks (one at "
        "least), a block per folder; with size_bytes, what TRAINYARD_CODE_QUOTA_BYTES counts"
    )
    file_count: int
    created_at: UtcDatetime


class CodeBundleDetail(CodeBundlePublic):
    files: list[CodeFile] = Field(description="the first 1000 files in archive order; file_count counts all")
    jobs: list[int] = Field(description="ids of the owner's jobs whose spec names this bundle, newest first")


class CodeBundlesPublic(BaseModel):
    data: list[CodeBundlePublic] = Field(description="newest first; an admin sees every user's")
    count: int


def _known_events(events: list[str]) -> list[str]:
    if unknown := unknown_events(events):
        raise ValueError(
            f"unknown event {', '.join(map(repr, unknown))}; valid: {', '.join(EVENT_NAMES)}, or '*' for all"
        )
    return events


class WebhookCreate(BaseModel):
    """POST /v1/webhooks: POST each of the caller's job state changes named in `events` to `url`."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=2048, description="http(s); its host must resolve to public addresses")
    events: Annotated[list[str], AfterValidator(_known_events)] = Field(
        min_length=1, description="job.<state> names (job.succeeded, job.failed, ...), or ['*'] for every one"
    )
    secret: str = Field(
        min_length=16,
        max_length=256,
        description="signs each body (X-Trainyard-Signature); never shown again",
    )
    all_users: bool = Field(False, strict=True, description="admins only: fire for every user's jobs")


class WebhookPublic(BaseModel):
    """A webhook as stored, without its secret."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    owner: str
    url: str
    events: list[str]
    all_users: bool
    created_at: UtcDatetime


class WebhooksPublic(BaseModel):
    data: list[WebhookPublic] = Field(
        description="the caller's webhooks (an admin's: every one), oldest first"
    )


class WebhookDeliveryPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int = Field(description="X-Trainyard-Delivery: the same on every attempt")
    job_id: int
    event: str
    at: UtcDatetime = Field(description="when the job changed state")
    status: str = Field(description="pending, delivered (answered 2xx) or failed (past the retry deadline)")
    attempts: int
    last_attempt_at: UtcDatetime | None
    delivered_at: UtcDatetime | None
    response_code: int | None = Field(description="the last attempt's HTTP status; null if none came back")
    error: str | None = Field(description="why the last attempt failed")


class WebhookDeliveriesPublic(BaseModel):
    data: list[WebhookDeliveryPublic] = Field(description="the latest deliveries, newest first")


class TrialCounts(BaseModel):
    running: int = Field(0, description="queued or running")
    completed: int = 0
    pruned: int = 0
    failed: int = Field(0, description="failed, cancelled, or never reported the objective")


class BestTrial(BaseModel):
    trial: int
    job_id: int | None
    value: float
    params: dict[str, Any]


class SweepPublic(BaseModel):
    id: int
    name: str
    owner: str
    status: str = Field(description="running, completed (every trial ended) or cancelled")
    created_at: UtcDatetime
    finished_at: UtcDatetime | None
    objective: dict[str, str] = Field(description="{metric, goal}")
    sampler: str
    pruner: str
    max_trials: int
    parallel: int
    trials: TrialCounts = Field(description="trials by state")
    best: BestTrial | None = Field(description="the best completed trial so far; null before one completes")
    steps_used: int = Field(description="optimizer steps every trial ran, pruned ones up to their stop")
    steps_if_unpruned: int = Field(
        description="the steps the same trials would have run by now without pruning: steps_used and what "
        "each pruned trial did not run of its total (a running trial's steps to come are not counted)"
    )
    config: dict[str, Any] = Field(description="the sweep as created")


class SweepsPublic(BaseModel):
    data: list[SweepPublic]
    next_cursor: int | None = Field(description="pass as ?cursor= for the next page; null on the last")


class TrialPublic(BaseModel):
    number: int
    job_id: int | None = Field(description="null if its spec was invalid, or once its job was deleted")
    job_status: JobStatus | None
    state: str = Field(description="running, completed, pruned or failed (Optuna's trial states)")
    params: dict[str, Any]
    latest: float | None = Field(description="the objective's latest report")
    best: float | None = Field(description="the objective's best report, by the sweep's goal")
    value: float | None = Field(description="a completed trial's objective: its last report")
    message: str | None = Field(description="why it was pruned or failed")
    steps: int | None
    total_steps: int | None


class TrialsPublic(BaseModel):
    data: list[TrialPublic] = Field(description="in trial order")


def forecast_ratio(forecast: float | None, measured: float | None) -> float | None:
    """Forecast over measured, as bench.forecast reports it: above 1, the forecast was high."""
    return None if not forecast or not measured else round(forecast / measured, 4)


class ForecastComparison(BaseModel):
    """One finished job's forecast beside what it measured; a ratio is forecast / measured."""

    job_id: int
    name: str
    model_kind: str | None = Field(description="the kind the forecast's calibration took it for")
    gpu: str | None = Field(description="the model of the GPU it ran on; null for a CPU job")
    forecast_peak_memory_bytes: int
    measured_peak_memory_bytes: int | None
    peak_ratio: float | None = Field(description="above 1: the forecast was high")
    forecast_step_time_s: float | None
    measured_step_time_s: float | None
    step_ratio: float | None


class ForecastSummary(BaseModel):
    jobs: int
    peak_ratio_median: float | None
    step_ratio_median: float | None
    within_10pct_peak: int = Field(description="how many jobs' peak ratio is within 0.9-1.1")
    within_20pct_step: int = Field(description="how many jobs' step ratio is within 0.8-1.2")


class ForecastAccuracy(BaseModel):
    """GET /v1/forecast/accuracy: forecasts against measured over recent finished jobs, newest first."""

    data: list[ForecastComparison]
    summary: ForecastSummary

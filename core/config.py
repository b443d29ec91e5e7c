"""All settings, from TRAINYARD_* environment variables. Built on first use so tests can override them."""

from __future__ import annotations

import base64
import binascii
import socket
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.code_unpack import MAX_DEPTH
from core.sweeps.spec import MAX_CHOICES

VAR_DIR = Path("var")


class AuthMode(StrEnum):
    ON = "on"
    OFF = "off"


class SandboxMode(StrEnum):
    # auto: built-in jobs run only the service's own code, on data the API checked, so the sandbox would cost
    # them the warm launcher's head start (worker/executors/local/warm/launcher.py) and guard against nothing
    # their spec can name.
    AUTO = "auto"
    ON = "on"
    OFF = "off"


class HttpParser(StrEnum):
    # Both bound an unfinished request head at max_header_bytes; httptools parses in C (app/http_head.py).
    HTTPTOOLS = "httptools"
    H11 = "h11"


class ArtifactStore(StrEnum):
    SHARED = "shared"  # runs_dir is one filesystem that the API and every worker see
    S3 = "s3"  # checkpoints and logs are uploaded to an S3-compatible bucket the API reads


class Executor(StrEnum):
    LOCAL = "local"  # Trainyard's workers place jobs on their own hosts (worker/executors/local/leases.py)
    SLURM = "slurm"  # a login node's worker hands each job to Slurm (worker/executors/slurm/, docs/slurm.md)


def _own_address(hostname: str) -> str:
    try:
        return socket.gethostbyname(hostname)
    except OSError:  # a hostname nothing resolves: only this host can reach itself
        return "127.0.0.1"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINYARD_", extra="ignore")

    database_url: str = f"sqlite:///{VAR_DIR}/trainyard.db"
    broker_url: str = f"sqla+sqlite:///{VAR_DIR}/broker.db"
    runs_dir: Path = VAR_DIR / "runs"
    data_dir: Path = VAR_DIR / "data"
    code_dir: Path = Field(VAR_DIR / "code", description="code bundles, unpacked read-only, one folder each")
    compile_cache_dir: Path = Field(
        VAR_DIR / "compile-cache",
        description="torch.compile's caches (Inductor's compiled graphs and autotuning, Triton's kernels), "
        "shared by this host's jobs outside the sandbox, so a repeated compiled job does not compile again",
    )
    environments: str = Field(
        "",
        description="named Python environments a spec may pick with `environment`: name=/path/to/venv,...",
    )
    user_code: bool = Field(
        True, description="run jobs that bring a code bundle (spec.code), inside the sandbox; off: refused"
    )
    code_max_bytes: int = Field(
        100 * 2**20, ge=1, le=2**40, description="the largest code bundle archive POST /v1/code accepts"
    )
    code_max_unpacked_bytes: int = Field(
        1 << 30,
        ge=1,
        le=2**42,
        description="a code bundle's files and folders on disk once unpacked: each file in whole 4 KiB "
        "blocks, a block per folder",
    )
    code_max_files: int = Field(
        10_000,
        ge=1,
        le=10**7,
        description="files and folders in one code bundle, the folders its paths imply included",
    )
    code_max_depth: int = Field(
        MAX_DEPTH,
        ge=1,
        le=MAX_DEPTH,
        description="levels of a code bundle's paths, the file included; a deeper path is refused (422)",
    )
    code_quota_bytes: int = Field(
        1 << 30,
        ge=0,
        le=2**50,
        description="per user: their code bundles' archives and unpacked files and folders, and their "
        "uploads in progress, together",
    )
    code_upload_timeout_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="how long POST /v1/code may take to send its body; a later one is refused (408) and its "
        "bytes removed",
    )
    db_busy_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="SQLite: how long a write (API or worker) waits for another's lock; past it the API "
        "answers 503",
    )
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    allowed_hosts: str = Field(
        "localhost,127.0.0.1,::1",
        description="Host header names the API answers besides `host`, comma-separated (a guard against DNS "
        "rebinding); `*`: any, for a proxy that checks them",
    )
    keep_alive_s: int = Field(
        5, ge=1, le=3600, description="the API closes a connection idle this long between requests"
    )
    # Half the usual 1024 open files a process may hold, which the database, logs and run files share.
    max_connections: int = Field(
        512,
        ge=1,
        le=1_000_000,
        description="connections and requests the API holds at once; past it a new request gets 503",
    )
    api_read_threads: int = Field(
        2,
        ge=1,
        le=64,
        description="threads per API process that answer the polled reads (a page of jobs, the queue; a "
        "job's GET too on a server database); more overlap a server database's round trips, but each one "
        "more that wants Python at once makes every request dearer",
    )
    max_header_bytes: int = Field(
        65536, ge=4096, le=2**24, description="the largest unfinished request head the API buffers"
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "info", description="the API's log; warning and above: no line per request (`make run`)"
    )
    http_parser: HttpParser = Field(
        HttpParser.HTTPTOOLS, description="httptools (in C) or h11 (in Python); both bound a head"
    )
    # A process serves one request's Python at a time (the GIL): more of them use more cores.
    api_workers: int = Field(
        1, ge=1, le=64, description="API processes `python -m app.serve` runs (uvicorn's --workers)"
    )
    api_one_cpu: bool = Field(
        False,
        description="each API process keeps its threads on one CPU of those it may use, a different one per "
        "process while there are enough (app/cpu_pin.py): its threads take turns at Python's lock, and a "
        "turn handed to another core costs more than one on the same core (docs/performance.md). `python -m "
        "app.serve` (make run, compose) turns it on unless it is set; off, the kernel places them",
    )
    hostname: str = Field(default_factory=socket.gethostname, description="this worker's host identity")
    advertise_address: str = Field(
        default_factory=lambda: _own_address(socket.gethostname()),
        description="where the other hosts reach this one: a multi-host job's rendezvous and collectives",
    )
    rendezvous_timeout_s: float = Field(
        300.0, gt=0, le=3600, description="how long a multi-host job's nodes wait for each other to start"
    )
    executor: Executor = Field(
        Executor.LOCAL,
        description="who decides where and when jobs run: local, Trainyard's own workers; slurm, a Slurm "
        "cluster, through one worker on a login node (docs/slurm.md)",
    )
    slurm_partition: str | None = Field(
        None, description="slurm: the partition jobs go to; unset: Slurm's default"
    )
    slurm_poll_s: float = Field(
        1.0, gt=0, le=60, description="slurm: how often the jobs' Slurm states are read"
    )
    slurm_signal_lead_s: int = Field(
        60,
        ge=5,
        le=3600,
        description="slurm: SIGTERM this long before Slurm's time limit: the ranks' final checkpoint",
    )
    slurm_startup_s: int = Field(
        600,
        ge=0,
        le=86400,
        description="slurm: added to limits.max_runtime_s in Slurm's --time, which counts start-up too; "
        "Trainyard stops the job at the limit itself, counting training alone",
    )
    slurm_cpus_per_gpu: int = Field(
        8, ge=1, le=256, description="slurm: cores asked for per GPU (--cpus-per-task), for the data loaders"
    )
    worker_concurrency: int = Field(4, ge=1, le=256, description="jobs one worker supervises at once")
    warm_launcher: bool = Field(
        True, description="keep a torchrun process that has imported torch ready for the next job"
    )
    warm_standbys: int = Field(
        1,
        ge=1,
        le=64,
        description="with warm_launcher: how many such processes wait, so that jobs launched together (a "
        "sweep's trials) start warm up to this many; each idle one holds about 0.7 GB",
    )
    sandbox: SandboxMode = Field(
        SandboxMode.AUTO,
        description="run jobs in bubblewrap (docs/security.md): auto, the jobs with a code bundle; on, every "
        "job; off, none, for a box whose users are all trusted",
    )
    job_uid: int = Field(
        65534, ge=1, le=2**31 - 1, description="a root worker runs sandboxed ranks as this uid (nobody)"
    )
    job_max_processes: int = Field(
        4096, ge=32, le=4_194_304, description="sandboxed: one job's processes and threads together"
    )
    job_max_open_files: int = Field(
        65536, ge=256, le=2**30, description="sandboxed: one process's open files"
    )
    job_max_file_gb: float = Field(
        256.0, gt=0, le=2**20, description="sandboxed: the largest file one job may write (a checkpoint)"
    )
    job_max_disk_gb: float | None = Field(
        None,
        gt=0,
        le=2**30,
        description="every job: its run directory's size, when limits.max_disk_gb is unset or larger",
    )
    job_max_metric_names: int = Field(
        256, ge=1, le=100_000, description="every job: distinct metric names stored; later names are dropped"
    )
    job_max_metric_rows: int = Field(
        100_000, ge=1, le=2**31 - 1, description="every job: rows stored per metric name; later rows dropped"
    )
    sweep_pruner_max_reports: int = Field(
        2_000,
        ge=1,
        le=100_000,
        description="a sweep's trial: reports of the objective its pruner judges; later ones are kept, "
        "unjudged (each judgement reads all the trial's reports, as Optuna's pruners do)",
    )
    heartbeat_s: float = Field(2.0, gt=0, le=300)
    reconcile_s: float = Field(
        1.0,
        gt=0,
        le=300,
        description="how often each worker acts on recorded facts: sweeps' next trials, jobs' dependants",
    )
    lease_timeout_s: float = Field(30.0, gt=0, le=3600, description="older heartbeat: reaped")
    requeue_after_s: float = Field(10.0, gt=0, le=3600, description="re-ring the doorbell for queued jobs")
    cancel_grace_s: float = Field(10.0, ge=0, le=300, description="SIGTERM to SIGKILL")
    preempt_grace_s: float = Field(
        120.0,
        ge=0,
        le=3600,
        description="a preempted job's (GPU or CPU) SIGTERM to SIGKILL: time to reach its next report step "
        "and checkpoint",
    )
    preempt_min_runtime_s: float = Field(
        600.0,
        ge=0,
        le=30 * 86400,
        description="an attempt of a GPU or CPU job runs this long before a higher priority can preempt it; "
        "a job waiting only for that says from when",
    )
    admin_priority_above: int = Field(
        50,
        ge=-100,
        le=100,
        description="priorities above this only admins may set (422 naming priority otherwise); every band "
        "schedules alike: a higher priority starts first and preempts running GPU or CPU jobs of strictly "
        "lower priority that are preemptible and past TRAINYARD_PREEMPT_MIN_RUNTIME_S",
    )
    cpu_overcommit: float = Field(
        1.0,
        gt=0,
        le=64,
        description="a host runs CPU jobs up to this many processes per core it has; a CPU job takes a core "
        "per training process (hogwild: per worker)",
    )
    rank_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="every process of a local job starts this many nice steps below the worker's CPU "
        "priority, so that its ranks and loader workers yield the cores to the API and the worker; 0: off",
    )
    auth: AuthMode = Field(
        AuthMode.OFF, description="on: every route but /healthz needs a bearer API key (docker-compose)"
    )
    quota_max_jobs: int = Field(32, ge=1, le=100_000, description="a user's queued and active jobs")
    quota_max_gpus: int = Field(64, ge=0, le=100_000, description="GPUs a user's unfinished jobs ask for")
    quota_retry_after_s: int = Field(30, ge=1, le=86400, description="Retry-After of a 429 over quota")
    # A process serves one request's Python at a time: more of one user's at once only queue them inside it,
    # ahead of other users' (the soak: 3 users' dashboards at 8 each put 17 requests ahead of a 4th's).
    user_max_requests: int = Field(
        2,
        ge=1,
        le=10_000,
        description="one user's requests each API process serves at once; the rest wait their turn",
    )
    slow_request_s: float = Field(
        1.0, gt=0, le=86400, description="a request answered slower than this is logged with its time"
    )
    user_max_waiting: int = Field(
        256, ge=0, le=100_000, description="one user's requests waiting their turn; past it, 429"
    )
    sweep_max_choices: int = Field(
        256,
        ge=2,
        le=MAX_CHOICES,
        description="a new sweep: the choices its categorical parameters list together; each trial's ask "
        "costs about 2 microseconds per choice per trial so far",
    )
    sweep_max_grid_points: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="a new sweep with sampler grid: its grid's points (the product of every parameter's); "
        "Optuna's GridSampler lists them all at each trial's ask",
    )
    sweep_max_dry_runs: int = Field(
        8,
        ge=2,
        le=256,
        description="a new sweep: the parameter sets its spec is planned at, a dry run each (the low and "
        "high corners, then categorical choices in turn)",
    )
    fair_share_half_life_s: float = Field(
        86400.0, gt=0, le=10**8, description="a user's GPU and CPU use counts half after this long"
    )
    fair_share_cpu_weight: float = Field(
        0.1, ge=0, le=1000, description="a CPU core-second's weight in fair share, where a GPU-second is 1"
    )
    telemetry_every_beats: int = Field(
        5, ge=1, le=10_000, description="sample a job's GPUs (NVML) every this many heartbeats"
    )
    gpu_idle_pct: float = Field(5.0, ge=0, le=100, description="a job's GPU below this utilisation idles")
    gpu_idle_after_s: float = Field(
        600.0, gt=0, le=10**7, description="a job's GPU idle on average this long: a warning event"
    )
    artifact_store: ArtifactStore = Field(
        ArtifactStore.SHARED, description="how checkpoints and logs reach the API; s3: hosts share no disk"
    )
    s3_endpoint_url: str | None = Field(None, description="an S3-compatible server (MinIO, Ceph); unset: AWS")
    s3_bucket: str | None = Field(None, description="for artifact_store=s3; credentials: AWS_* variables")
    s3_prefix: str = Field("trainyard", description="keys are <prefix>/<job id>/<path in the run directory>")
    upload_drain_s: float = Field(
        600.0, ge=0, le=86400, description="s3: how long a job's end waits for its last uploads to finish"
    )
    data_cache_max_bytes: int = Field(
        64 * 2**30,
        ge=0,
        le=2**40,
        description="the most data.cache_bytes a job may ask: what it keeps of an s3:// data.root per host",
    )
    data_list_max_objects: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="an s3:// data.root: the most objects a submission or dry run lists (the rest uncounted)",
    )
    data_list_timeout_s: float = Field(
        10.0, gt=0, le=300, description="an s3:// data.root: the longest a submission or dry run lists it"
    )
    gpu_inventory: str | None = Field(
        None, description="test only: comma-separated fake GPU ids that replace NVML discovery"
    )
    webhook_allow: str = Field(
        "",
        description="comma-separated host patterns (fnmatch: '*.internal', '10.0.0.5') a webhook may reach "
        "on a loopback, private or other non-global address; any other host must resolve to public ones",
    )
    webhook_timeout_s: float = Field(
        5.0,
        gt=0,
        le=60,
        description="a webhook attempt's whole deadline from its claim: name lookup, connect, send, status "
        "line, headers and body together (a claim is held this long plus 30 s)",
    )
    webhook_max_in_flight: int = Field(
        16, ge=2, le=256, description="webhook attempts one API process sends at once"
    )
    webhook_max_in_flight_per_destination: int = Field(
        4,
        ge=1,
        le=255,
        description="of those, to one destination (scheme, host and port): a slow receiver holds no more "
        "than this many",
    )
    forecast: bool = Field(
        True,
        description="forecast each job's peak memory and step time before it is stored (app/services/"
        "forecasts.py), and refuse one that will not fit its GPU",
    )
    forecast_timeout_s: float = Field(
        30.0,
        gt=0,
        le=600,
        description="a forecast taking longer is given up: the job is stored without one, not refused",
    )
    forecast_cache_entries: int = Field(
        256, ge=1, le=100_000, description="forecasts each API process keeps, by the spec's shape"
    )
    secrets_key: SecretStr | None = Field(
        None,
        description="the key that seals users' secrets at rest (AES-256-GCM): 32 bytes in base64 "
        "(`python -m core.secrets new-key`); the API and every worker need the same one. Unset: secrets "
        "are refused (503), never stored in the clear",
    )
    secrets_max_per_user: int = Field(
        100, ge=0, le=10_000, description="secrets one user may hold (an admin's shared ones count too)"
    )
    webhook_max_per_user: int = Field(
        20, ge=1, le=10_000, description="webhooks one user may have; each adds a delivery per state change"
    )
    webhook_retry_deadline_s: float = Field(
        86400.0,
        gt=0,
        le=30 * 86400,
        description="a delivery not answered 2xx this long after its event fails",
    )
    webhook_backoff_s: float = Field(
        2.0, gt=0, le=3600, description="the wait after a delivery's first failure"
    )
    webhook_backoff_max_s: float = Field(
        600.0, gt=0, le=86400, description="the longest wait between attempts"
    )
    webhook_poll_s: float = Field(
        1.0, gt=0, le=60, description="how often the API's sender looks for due ones"
    )
    mlflow_uri: str | None = Field(
        None,
        description="an MLflow tracking server (http://mlflow:5000): jobs with tracking.mlflow, or every "
        "job with TRAINYARD_MLFLOW_ALL_JOBS, are exported to it as runs by the API; unset: refused",
    )
    mlflow_all_jobs: bool = Field(False, description="export every job to MLflow, tracking.mlflow or not")
    mlflow_experiment: str = Field(
        "trainyard",
        min_length=1,
        max_length=256,
        description="the MLflow experiment of jobs whose tracking.mlflow names none",
    )
    mlflow_poll_s: float = Field(
        2.0, gt=0, le=300, description="how often the API's exporter looks for rows to send to MLflow"
    )
    public_url: str | None = Field(
        None,
        description="where users reach this service (https://trainyard.example.com); each MLflow run is "
        "tagged with its job's page there",
    )

    @field_validator("runs_dir", "data_dir", "code_dir", "compile_cache_dir")
    @classmethod
    def absolute(cls, path: Path) -> Path:
        return path.resolve()

    @field_validator("secrets_key")
    @classmethod
    def aes_256_key(cls, key: SecretStr | None) -> SecretStr | None:
        if key is None or not key.get_secret_value():  # compose passes an unset key as empty
            return None
        try:
            size = len(base64.b64decode(key.get_secret_value(), validate=True))
        except (binascii.Error, ValueError):
            size = -1
        if size != 32:
            raise ValueError(
                "TRAINYARD_SECRETS_KEY must be 32 bytes in base64; make one with "
                "`python -m core.secrets new-key`"
            )
        return key

    @field_validator("s3_prefix")
    @classmethod
    def folder_name(cls, prefix: str) -> str:
        stripped = prefix.strip("/")
        if not stripped:
            raise ValueError("TRAINYARD_S3_PREFIX must name a folder in the bucket, such as 'trainyard'")
        return stripped

    @model_validator(mode="after")
    def s3_needs_a_bucket(self) -> Settings:
        if self.artifact_store is ArtifactStore.S3 and not self.s3_bucket:
            raise ValueError("TRAINYARD_ARTIFACT_STORE=s3 needs a bucket: set TRAINYARD_S3_BUCKET")
        return self

    @model_validator(mode="after")
    def slurm_shares_the_runs_dir(self) -> Settings:
        # The nodes write the run directory and the login node's worker reads it: one filesystem.
        if self.executor is Executor.SLURM and self.artifact_store is not ArtifactStore.SHARED:
            raise ValueError(
                "TRAINYARD_EXECUTOR=slurm reads runs on the cluster's shared filesystem: set "
                "TRAINYARD_ARTIFACT_STORE=shared and TRAINYARD_RUNS_DIR to a folder every node mounts"
            )
        return self

    @model_validator(mode="after")
    def webhook_destinations_leave_room(self) -> Settings:
        # One slow receiver must leave slots for everyone else's deliveries.
        if self.webhook_max_in_flight_per_destination >= self.webhook_max_in_flight:
            raise ValueError(
                "TRAINYARD_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION "
                f"({self.webhook_max_in_flight_per_destination}) must be below "
                f"TRAINYARD_WEBHOOK_MAX_IN_FLIGHT ({self.webhook_max_in_flight}), so one slow receiver "
                "cannot hold every slot; lower the first or raise the second"
            )
        return self

    @field_validator("environments")
    @classmethod
    def named_venvs(cls, value: str) -> str:
        for entry in filter(None, value.split(",")):
            name, _, path = entry.partition("=")
            if not name.strip() or not path.strip():
                raise ValueError(
                    f"TRAINYARD_ENVIRONMENTS entry {entry!r} is not name=/path/to/venv; "
                    "separate entries with ','"
                )
        return value

    @property
    def environment_pythons(self) -> dict[str, str]:
        """Each registered environment's interpreter, by name."""
        entries = (entry.partition("=") for entry in filter(None, self.environments.split(",")))
        return {name.strip(): str(Path(path.strip()) / "bin" / "python") for name, _, path in entries}

    @property
    def trusted_hosts(self) -> list[str]:
        """allowed_hosts and `host`, unless that is a wildcard address, which names no host."""
        names = [name.strip() for name in self.allowed_hosts.split(",") if name.strip()]
        return names if self.host in ("0.0.0.0", "::", "") else [*names, self.host]

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


@lru_cache
def get_settings() -> Settings:
    return Settings()

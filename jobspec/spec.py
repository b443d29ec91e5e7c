"""The job spec users submit: a schema with field-level checks only.

Whether the fields fit together, the model and the cluster is the planner's question (jobspec/plan.py), asked
once per submission. Shared by the API, the worker and the trainer; it must not import torch: the API never
loads it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, NamedTuple

from pydantic import Field, PrivateAttr, ValidatorFunctionWrapHandler, field_validator, model_validator

from jobspec.spec_env import JobEnv
from jobspec.spec_fields import Choice, Section
from jobspec.spec_inputs import DataPlacement as DataPlacement
from jobspec.spec_inputs import DataSpec as DataSpec
from jobspec.spec_inputs import ModelSpec as ModelSpec
from jobspec.spec_program import ProgramSpec, check_program_or_inputs
from jobspec.spec_tracking import TrackingSpec
from jobspec.spec_train import Loss as Loss
from jobspec.spec_train import LrScaling as LrScaling
from jobspec.spec_train import OnNonFinite as OnNonFinite
from jobspec.spec_train import Optimizer as Optimizer
from jobspec.spec_train import Schedule as Schedule
from jobspec.spec_train import TrainSpec as TrainSpec


class Strategy(StrEnum):
    AUTO = "auto"
    SINGLE = "single"
    DP = "dp"
    DDP = "ddp"
    FSDP = "fsdp"
    MODEL_PARALLEL = "model_parallel"
    PIPELINE = "pipeline"
    HOGWILD = "hogwild"


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


# apex's opt levels, accepted for users coming from apex.amp. O1 and O2 both mean fp16 compute with loss
# scaling (native autocast + GradScaler covers what apex did by patching ops or casting weights); O3 is
# pure low precision without loss scaling, which is only safe in bf16's range.
APEX_LEVELS: dict[str, Precision] = {
    "O0": Precision.FP32,
    "O1": Precision.FP16,
    "O2": Precision.FP16,
    "O3": Precision.BF16,
}


class DevicePlacement(StrEnum):
    CPU = "cpu"
    GPU = "gpu"


ModuleName = Annotated[str, Field(min_length=1, max_length=128)]
ClassName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
HostName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_.:-]+$")]


class ParallelSpec(Section):
    strategy: Choice[Strategy] = Strategy.AUTO
    gpus: list[Annotated[int, Field(ge=0, le=255)]] | None = Field(
        None, max_length=64, description="physical GPU ids of the host"
    )
    num_gpus: int | None = Field(None, ge=0, le=64, description="how many GPUs, any free ones")
    nproc_per_node: int | None = Field(
        None, ge=1, le=64, description="processes; on CPU the gloo world size, on GPU one per GPU"
    )
    nnodes: int = Field(
        1,
        ge=1,
        le=64,
        description="hosts the job spans (ddp, fsdp); gpus, num_gpus and nproc_per_node are per host",
    )
    host: HostName | None = Field(
        None, description="run on this host (a one-host job); default: any with room"
    )
    sync_batchnorm: bool = Field(False, description="ddp only: convert BatchNorm to SyncBatchNorm")
    split_at: list[ModuleName] | None = Field(
        None,
        max_length=63,
        description="model_parallel, pipeline: module names where a new stage begins; default per model",
    )
    microbatches: int | None = Field(None, ge=1, le=1024, description="pipeline: micro-batches per batch")
    placement: dict[ModuleName, Choice[DevicePlacement]] | None = Field(
        None,
        max_length=64,
        description="hybrid: module name -> cpu or gpu; the rest of the model goes to the GPU",
    )
    wrap: list[ClassName] | None = Field(
        None,
        max_length=32,
        description="fsdp, activation checkpointing: class names of the model's blocks, each sharded or "
        "recomputed as a unit; default: the children of its largest ModuleList, else per model",
    )

    @field_validator("gpus")
    @classmethod
    def distinct_gpus(cls, gpus: list[int] | None) -> list[int] | None:
        if gpus is not None and len(set(gpus)) != len(gpus):
            raise ValueError(f"parallel.gpus lists a GPU twice: {gpus}; list each GPU once")
        return gpus


class CudaGraphs(StrEnum):
    OFF = "off"
    ON = "on"
    AUTO = "auto"  # capture where the spec allows it, and keep replaying only if it beats the eager step


class PerformanceSpec(Section):
    channels_last: bool = False
    compile: bool = Field(False, description="torch.compile the model; not under hogwild")
    activation_checkpointing: bool = Field(False, description="recompute activations in backward")
    cudnn_benchmark: bool = Field(
        True,
        description="let cuDNN pick the fastest kernels for fixed shapes; off under dp (per-thread plans)",
    )
    cuda_graphs: Choice[CudaGraphs] = Field(
        CudaGraphs.OFF,
        description="capture the whole training step (forward, backward, update; under ddp the gradients' "
        "all-reduce too) in a CUDA graph and replay it: on, off, or auto (on where the spec allows it and "
        "replays beat eager steps). Strategies single and ddp, on GPUs, bf16 or fp32",
    )

    @field_validator("cuda_graphs", mode="before")
    @classmethod
    def graphs_as_bool(cls, value: object) -> object:
        """true and false read as on and off."""
        if isinstance(value, bool):
            return CudaGraphs.ON if value else CudaGraphs.OFF
        return value


class CheckpointSpec(Section):
    every_n_steps: int = Field(0, ge=0, le=10_000_000, description="0: only by epoch")
    every_n_epochs: int = Field(1, ge=0, le=100_000, description="0: only by step")
    keep_last: int = Field(3, ge=1, le=1000)
    save_final: bool = True
    # le: checkpoint ids are 32-bit on PostgreSQL, and a larger one would overflow the query.
    resume_from: int | None = Field(None, ge=1, le=2**31 - 1, description="checkpoint id to continue from")
    resume_from_job: int | None = Field(
        None,
        ge=1,
        le=2**31 - 1,
        description="continue from this job's latest checkpoint, read when this job starts; the job must be "
        "in depends_on, so that it has succeeded by then",
    )


class MetricsSpec(Section):
    every_n_steps: int = Field(10, ge=1, le=100_000, description="all-reduce and report every N steps")
    tensorboard: bool = Field(
        False, description="rank 0 also writes TensorBoard event files; not under hogwild"
    )


class ProfileSpec(Section):
    steps: int = Field(
        0, ge=0, le=200, description="torch.profiler on rank 0 for this many steps; 0: off; not under hogwild"
    )
    skip_first: int = Field(5, ge=0, le=10_000, description="steps to run before profiling (warm-up)")


class LimitsSpec(Section):
    max_runtime_s: int | None = Field(
        None,
        ge=1,
        le=30 * 86400,
        description="seconds from placement, start-up not counted once training runs; past it: timed_out",
    )
    max_pending_s: int | None = Field(None, ge=1, le=30 * 86400)
    max_restarts: int = Field(0, ge=0, le=100, description="retryable failures restart from a checkpoint")
    collective_timeout_s: int = Field(600, ge=10, le=86400, description="a hung collective fails after this")
    stall_timeout_s: int | None = Field(
        None,
        ge=5,
        le=30 * 86400,
        description="no step for this long after the attempt's first: stalled (every rank's stack kept, then "
        "failed, or restarted as limits.max_restarts allows); unset: the larger of 600 s and 20x the median "
        "time between its step counter's advances, and for an NCCL job at least limits.collective_timeout_s "
        "plus 60 s, so that torch's flight recorder has dumped; before the first step, the start-up "
        "allowance (TRAINYARD_SLURM_STARTUP_S, at least 600 s), which a longer value set here extends",
    )
    max_disk_gb: float | None = Field(
        None, gt=0, le=2**30, description="the run directory's size (checkpoints, logs); past it: disk_limit"
    )
    preemptible: bool = Field(
        True, description="a job of higher priority may stop it, to resume later from its checkpoint"
    )


CODE_ID_PATTERN = r"^sha256:[0-9a-f]{64}$"
# Each id listed is a row and a check at submission: a user's list is bounded, never taken whole.
MAX_DEPENDENCIES = 16
JobId = Annotated[int, Field(ge=1, le=2**31 - 1)]


class Inputs(NamedTuple):
    model: ModelSpec
    data: DataSpec


class JobSpec(Section):
    name: str = Field("job", min_length=1, max_length=128)
    environment: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="a Python environment the admin registered (TRAINYARD_ENVIRONMENTS) for the ranks; "
        "default: the worker's own",
    )
    code: str | None = Field(
        None,
        pattern=CODE_ID_PATTERN,
        description="a code bundle's id from POST /v1/code (`trainyard code push DIR`); its modules are "
        "what model.factory, data.factory and train.loss name, and program's script",
    )
    # Either model and data (the trainer's loop), or program (the user's own script): never both.
    model: ModelSpec | None = None
    data: DataSpec | None = None
    program: ProgramSpec | None = None
    train: TrainSpec = Field(default_factory=TrainSpec)
    parallel: ParallelSpec = Field(default_factory=ParallelSpec)
    precision: Choice[Precision] = Field(
        Precision.FP32, description="fp32, bf16, fp16; apex O0-O3 are aliases"
    )
    performance: PerformanceSpec = Field(default_factory=PerformanceSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    profile: ProfileSpec = Field(default_factory=ProfileSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    env: JobEnv = Field(default_factory=dict)
    depends_on: list[JobId] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description="job ids (yours) that must all succeed before this one starts; it waits queued, and is "
        "cancelled (dependency_failed) if one of them ends otherwise",
    )
    priority: int = Field(
        0,
        ge=-100,
        le=100,
        description="higher starts first and preempts running jobs of strictly lower priority (GPU or CPU); "
        "above TRAINYARD_ADMIN_PRIORITY_ABOVE only admins may set it",
    )

    # The precision as the user wrote it ("O1" as much as "fp16"), so that a message quotes their own words.
    _precision_written: str = PrivateAttr("")

    @field_validator("precision", mode="before")
    @classmethod
    def apex_alias(cls, value: object) -> object:
        if isinstance(value, str) and value.upper() in APEX_LEVELS:
            return APEX_LEVELS[value.upper()]
        return value

    @field_validator("depends_on")
    @classmethod
    def distinct_dependencies(cls, ids: list[int]) -> list[int]:
        if len(set(ids)) != len(ids):
            raise ValueError(f"depends_on lists a job twice: {ids}; list each job once")
        return ids

    @model_validator(mode="before")
    @classmethod
    def program_or_inputs(cls, data: object) -> object:
        check_program_or_inputs(data)
        return data

    @model_validator(mode="wrap")
    @classmethod
    def remember_precision_written(cls, data: object, handler: ValidatorFunctionWrapHandler) -> JobSpec:
        spec: JobSpec = handler(data)
        written = data.get("precision") if isinstance(data, dict) else None
        spec._precision_written = written if isinstance(written, str) else spec.precision.value
        return spec

    @property
    def inputs(self) -> Inputs:
        """model and data, which every job but a program has (program_or_inputs sees to it)."""
        if self.model is None or self.data is None:
            raise ValueError("a program job has no model or data section: its script builds its own")
        return Inputs(self.model, self.data)

    @property
    def precision_written(self) -> str:
        """`precision` as written, e.g. "O2" where `precision` is fp16."""
        return self._precision_written or self.precision.value

"""The job spec users submit: a schema with field-level checks only.

Whether the fields fit together, the model and the cluster is the planner's question (trainers/plan.py), asked
once per submission. Shared by the API, the worker and the trainer; it must not import torch: the API never
loads it.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Annotated, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, field_validator, model_validator

from trainers.catalog.archs import Arch
from trainers.catalog.datasets import DatasetName


class Section(BaseModel):
    # Strict: a value keeps the JSON type it was sent with. Lax mode would read "5" as 5 and 1 as true, so a
    # mistyped spec would run with values the user never wrote; ints are still taken where floats are due.
    model_config = ConfigDict(extra="forbid", strict=True)


AnyEnum = TypeVar("AnyEnum", bound=StrEnum)
# Strict mode takes a plain string for an enum only from raw JSON, but the API (FastAPI) and the worker (a
# stored spec) validate parsed JSON, where enum values are plain strings: enum fields take their values.
Choice = Annotated[AnyEnum, Strict(False)]


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


class Optimizer(StrEnum):
    SGD = "sgd"
    ADAM = "adam"
    ADAMW = "adamw"


class Schedule(StrEnum):
    CONSTANT = "constant"
    COSINE = "cosine"
    STEP = "step"
    PLATEAU = "plateau"
    ONECYCLE = "onecycle"


class LrScaling(StrEnum):
    NONE = "none"
    LINEAR = "linear"
    SQRT = "sqrt"


class DataPlacement(StrEnum):
    AUTO = "auto"
    GPU = "gpu"
    CPU = "cpu"


PositiveFloat = Annotated[float, Field(gt=0, le=1e4)]


def _finite(value: float, field: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number, got {value}")
    return value


def known(choices: type[StrEnum], field: str, value: object) -> object:
    """A message that lists the choices, where pydantic's would quote each one."""
    if isinstance(value, str) and value not in {member.value for member in choices}:
        raise ValueError(f"unknown {field} {value!r}; choose one of {', '.join(choices)}")
    return value


def json_number(value: object) -> object:
    """One message per bad value, where the int | float union would give one per member."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a JSON number, got {json.dumps(value, default=repr)}")
    return value


KwargValue = Annotated[int | float, BeforeValidator(json_number)]


class ModelSpec(Section):
    arch: Choice[Arch] = Field(description="architecture from the registry: see the table below")
    kwargs: dict[str, KwargValue] = Field(
        default_factory=dict, description="constructor args the architecture allows: see the table below"
    )

    @field_validator("arch", mode="before")
    @classmethod
    def known_arch(cls, arch: object) -> object:
        return known(Arch, "model.arch", arch)


class DataSpec(Section):
    dataset: Choice[DatasetName] = Field(description="dataset from the registry: see the table below")
    root: str | None = Field(
        None,
        max_length=1024,
        description="cifar10, mnist, image_folder: a directory relative to TRAINYARD_DATA_DIR",
    )
    num_samples: int = Field(4096, ge=16, le=10_000_000, description="synthetic only: training samples")
    num_classes: int = Field(10, ge=2, le=1000, description="synthetic only: classes")
    channels: int = Field(3, ge=1, le=4, description="synthetic only: image channels")
    image_size: int | None = Field(
        None, ge=4, le=512, description="image models: side of the square images they see; default per model"
    )
    val_fraction: float = Field(
        0.1, ge=0.0, le=0.5, description="share held out for evaluation; cifar10, mnist: their test split"
    )
    placement: Choice[DataPlacement] = Field(
        DataPlacement.AUTO, description="where batches live: auto, gpu (GPU jobs only), cpu"
    )
    vocab_size: int = Field(10_000, ge=2, le=20_000_000, description="synthetic_bags: distinct token ids")
    bag_size: int = Field(16, ge=1, le=1024, description="synthetic_bags: tokens per sample")
    loader_workers: int = Field(0, ge=0, le=64, description="on-disk data: DataLoader worker processes")

    @field_validator("dataset", mode="before")
    @classmethod
    def known_dataset(cls, dataset: object) -> object:
        return known(DatasetName, "data.dataset", dataset)

    @field_validator("root")
    @classmethod
    def relative_root(cls, root: str | None) -> str | None:
        if root is None:
            return None
        parts = root.replace("\\", "/").split("/")
        if root.startswith(("/", "~")) or ".." in parts or "\x00" in root:
            raise ValueError(
                f"data.root {root!r} must be a path inside TRAINYARD_DATA_DIR, like 'cifar10'; "
                "no absolute paths or '..'"
            )
        return root


class TrainSpec(Section):
    epochs: int | None = Field(None, ge=1, le=100_000)
    max_steps: int | None = Field(None, ge=1, le=10_000_000, description="optimizer steps; wins over epochs")
    batch_size: int = Field(64, ge=1, le=1_048_576, description="global batch: summed over all ranks")
    optimizer: Choice[Optimizer] = Field(
        Optimizer.SGD, description="embedding_bag: sgd, unless strategy fsdp (sparse gradients)"
    )
    lr: PositiveFloat = 0.05
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="sgd only; not on an embedding_bag table")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0)
    schedule: Choice[Schedule] = Schedule.CONSTANT
    step_size_epochs: int = Field(30, ge=1, le=100_000, description="schedule=step: decay period")
    gamma: float = Field(0.1, gt=0.0, le=1.0, description="schedule=step and plateau: decay factor")
    plateau_patience: int = Field(2, ge=0, le=1000, description="schedule=plateau: evaluations without gain")
    onecycle_pct_start: float = Field(0.3, gt=0.0, lt=1.0, description="schedule=onecycle: share rising")
    warmup_steps: int = Field(0, ge=0, le=1_000_000)
    lr_scaling: Choice[LrScaling] = Field(
        LrScaling.NONE, description="scale lr by global batch / base_batch_size"
    )
    base_batch_size: int = Field(256, ge=1, le=1_048_576)
    grad_accum_steps: int = Field(1, ge=1, le=1024)
    clip_grad_norm: float | None = Field(None, gt=0.0, le=1e6)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    eval_every_epochs: int = Field(
        1, ge=0, le=100_000, description="0 disables evaluation (refused with schedule=plateau)"
    )

    @field_validator("lr")
    @classmethod
    def finite_lr(cls, lr: float) -> float:
        return _finite(lr, "train.lr")

    @model_validator(mode="after")
    def has_length(self) -> TrainSpec:
        if self.epochs is None and self.max_steps is None:
            self.epochs = 1
        return self


class DevicePlacement(StrEnum):
    CPU = "cpu"
    GPU = "gpu"


ModuleName = Annotated[str, Field(min_length=1, max_length=128)]
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

    @field_validator("gpus")
    @classmethod
    def distinct_gpus(cls, gpus: list[int] | None) -> list[int] | None:
        if gpus is not None and len(set(gpus)) != len(gpus):
            raise ValueError(f"parallel.gpus lists a GPU twice: {gpus}; list each GPU once")
        return gpus


class PerformanceSpec(Section):
    channels_last: bool = False
    compile: bool = Field(False, description="torch.compile the model; not under hogwild")
    activation_checkpointing: bool = Field(False, description="recompute activations in backward")
    cudnn_benchmark: bool = Field(
        True,
        description="let cuDNN pick the fastest kernels for fixed shapes; off under dp (per-thread plans)",
    )


class CheckpointSpec(Section):
    every_n_steps: int = Field(0, ge=0, le=10_000_000, description="0: only by epoch")
    every_n_epochs: int = Field(1, ge=0, le=100_000, description="0: only by step")
    keep_last: int = Field(3, ge=1, le=1000)
    save_final: bool = True
    resume_from: int | None = Field(None, ge=1, description="checkpoint id to continue from")


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
    max_runtime_s: int | None = Field(None, ge=1, le=30 * 86400)
    max_pending_s: int | None = Field(None, ge=1, le=30 * 86400)
    max_restarts: int = Field(0, ge=0, le=100, description="retryable failures restart from a checkpoint")
    collective_timeout_s: int = Field(600, ge=10, le=86400, description="a hung collective fails after this")


CODE_ID_PATTERN = r"^sha256:[0-9a-f]{64}$"


class JobSpec(Section):
    name: str = Field("job", min_length=1, max_length=128)
    code: str | None = Field(
        None,
        pattern=CODE_ID_PATTERN,
        description="a code bundle's id from POST /v1/code (`trainyard code push DIR`); its modules are "
        "what model.factory, data.factory and train.loss name",
    )
    model: ModelSpec
    data: DataSpec
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
    priority: int = Field(0, ge=-100, le=100)

    @field_validator("precision", mode="before")
    @classmethod
    def apex_alias(cls, value: object) -> object:
        if isinstance(value, str) and value.upper() in APEX_LEVELS:
            return APEX_LEVELS[value.upper()]
        return value

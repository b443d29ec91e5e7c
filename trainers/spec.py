"""The job spec users submit, and the plan resolved from it.

Shared by the API (validation, dry runs), the worker (launch) and the trainer (what to build). It must not
import torch: the API never loads it.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Strategy(StrEnum):
    AUTO = "auto"
    SINGLE = "single"
    DDP = "ddp"


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


class Optimizer(StrEnum):
    SGD = "sgd"
    ADAM = "adam"
    ADAMW = "adamw"


class Schedule(StrEnum):
    CONSTANT = "constant"
    COSINE = "cosine"
    STEP = "step"


class LrScaling(StrEnum):
    NONE = "none"
    LINEAR = "linear"
    SQRT = "sqrt"


class DataPlacement(StrEnum):
    AUTO = "auto"
    GPU = "gpu"
    CPU = "cpu"


# Allowed model kwargs per architecture: name -> (type, low, high). Anything else is refused, so a spec can
# never pass arbitrary keyword arguments into a constructor.
MODEL_KWARGS: dict[str, dict[str, tuple[type, float, float]]] = {
    "mlp": {"hidden": (int, 4, 16384), "depth": (int, 1, 32)},
    "small_cnn": {"channels": (int, 4, 1024)},
    "alexnet": {"dropout": (float, 0.0, 0.9)},
    "resnet18": {},
    "resnet50": {},
}

PositiveFloat = Annotated[float, Field(gt=0, le=1e4)]


def _finite(value: float, field: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number, got {value}")
    return value


class ModelSpec(Section):
    arch: str = Field(description="Architecture from the registry: " + ", ".join(MODEL_KWARGS))
    kwargs: dict[str, int | float] = Field(default_factory=dict, description="Allow-listed constructor args")

    @field_validator("arch")
    @classmethod
    def known_arch(cls, arch: str) -> str:
        if arch not in MODEL_KWARGS:
            raise ValueError(f"unknown model.arch {arch!r}; choose one of {', '.join(MODEL_KWARGS)}")
        return arch

    @model_validator(mode="after")
    def allowed_kwargs(self) -> ModelSpec:
        allowed = MODEL_KWARGS[self.arch]
        for key, value in self.kwargs.items():
            if key not in allowed:
                names = ", ".join(allowed) or "none"
                raise ValueError(f"model.kwargs.{key} is not accepted for {self.arch}; allowed: {names}")
            kind, low, high = allowed[key]
            if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"model.kwargs.{key} must be an integer")
            if not low <= value <= high:
                raise ValueError(f"model.kwargs.{key}={value} is out of range; use {low}..{high}")
        return self


class DataSpec(Section):
    dataset: str = Field(description="synthetic (seeded, learnable) or digits (scikit-learn's 8x8 digits)")
    num_samples: int = Field(4096, ge=16, le=10_000_000, description="synthetic only: training samples")
    num_classes: int = Field(10, ge=2, le=1000, description="synthetic only: classes")
    channels: int = Field(3, ge=1, le=4, description="synthetic only: image channels")
    image_size: int | None = Field(
        None, ge=4, le=512, description="side of the square images the model sees; default per model"
    )
    val_fraction: float = Field(0.1, ge=0.0, le=0.5, description="share held out for evaluation")
    placement: DataPlacement = Field(DataPlacement.AUTO, description="where batches live: auto, gpu, cpu")

    @field_validator("dataset")
    @classmethod
    def known_dataset(cls, dataset: str) -> str:
        if dataset not in ("synthetic", "digits"):
            raise ValueError(f"unknown data.dataset {dataset!r}; choose synthetic or digits")
        return dataset


class TrainSpec(Section):
    epochs: int | None = Field(None, ge=1, le=100_000)
    max_steps: int | None = Field(None, ge=1, le=10_000_000, description="optimizer steps; wins over epochs")
    batch_size: int = Field(64, ge=1, le=1_048_576, description="global batch: summed over all ranks")
    optimizer: Optimizer = Optimizer.SGD
    lr: PositiveFloat = 0.05
    momentum: float = Field(0.9, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0, le=1.0)
    schedule: Schedule = Schedule.CONSTANT
    step_size_epochs: int = Field(30, ge=1, le=100_000, description="schedule=step: decay period")
    gamma: float = Field(0.1, gt=0.0, le=1.0, description="schedule=step: decay factor")
    warmup_steps: int = Field(0, ge=0, le=1_000_000)
    lr_scaling: LrScaling = Field(LrScaling.NONE, description="scale lr by global batch / base_batch_size")
    base_batch_size: int = Field(256, ge=1, le=1_048_576)
    grad_accum_steps: int = Field(1, ge=1, le=1024)
    clip_grad_norm: float | None = Field(None, gt=0.0, le=1e6)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    eval_every_epochs: int = Field(1, ge=0, le=100_000, description="0 disables evaluation")

    @field_validator("lr")
    @classmethod
    def finite_lr(cls, lr: float) -> float:
        return _finite(lr, "train.lr")

    @model_validator(mode="after")
    def has_length(self) -> TrainSpec:
        if self.epochs is None and self.max_steps is None:
            self.epochs = 1
        return self


class ParallelSpec(Section):
    strategy: Strategy = Strategy.AUTO
    gpus: list[Annotated[int, Field(ge=0, le=255)]] | None = Field(
        None, max_length=64, description="physical GPU ids of the host"
    )
    num_gpus: int | None = Field(None, ge=0, le=64, description="how many GPUs, any free ones")
    nproc_per_node: int | None = Field(
        None, ge=1, le=64, description="processes; on CPU the gloo world size, on GPU one per GPU"
    )
    sync_batchnorm: bool = Field(False, description="ddp only: convert BatchNorm to SyncBatchNorm")

    @model_validator(mode="after")
    def consistent_devices(self) -> ParallelSpec:
        if self.gpus is not None:
            if len(set(self.gpus)) != len(self.gpus):
                raise ValueError(f"parallel.gpus lists a GPU twice: {self.gpus}")
            if self.num_gpus is not None and self.num_gpus != len(self.gpus):
                raise ValueError("give parallel.gpus or parallel.num_gpus, not both")
        return self


class PerformanceSpec(Section):
    channels_last: bool = False
    compile: bool = Field(False, description="torch.compile the model")


class CheckpointSpec(Section):
    every_n_steps: int = Field(0, ge=0, le=10_000_000, description="0: only by epoch")
    every_n_epochs: int = Field(1, ge=0, le=100_000, description="0: only by step")
    keep_last: int = Field(3, ge=1, le=1000)
    save_final: bool = True
    resume_from: int | None = Field(None, ge=1, description="checkpoint id to continue from")


class MetricsSpec(Section):
    every_n_steps: int = Field(10, ge=1, le=100_000, description="all-reduce and report every N steps")


class LimitsSpec(Section):
    max_runtime_s: int | None = Field(None, ge=1, le=30 * 86400)
    max_pending_s: int | None = Field(None, ge=1, le=30 * 86400)


class JobSpec(Section):
    name: str = Field("job", min_length=1, max_length=128)
    model: ModelSpec
    data: DataSpec
    train: TrainSpec = Field(default_factory=TrainSpec)
    parallel: ParallelSpec = Field(default_factory=ParallelSpec)
    precision: Precision = Precision.FP32
    performance: PerformanceSpec = Field(default_factory=PerformanceSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    priority: int = Field(0, ge=-100, le=100)

    @model_validator(mode="after")
    def coherent(self) -> JobSpec:
        resolve_plan(self)
        return self


class Plan(BaseModel):
    """What will run: derived from the spec alone, so a dry run shows exactly what a submission would do."""

    strategy: Strategy
    strategy_reason: str
    device: str  # "cpu" or "cuda"
    backend: str  # torch.distributed backend
    world_size: int
    nproc_per_node: int
    gpus: list[int] | None  # physical ids when the spec names them; leased ids fill in at start
    num_gpus: int
    per_rank_batch: int  # samples per rank per optimizer step
    micro_batch: int  # samples per rank per forward/backward
    precision: Precision
    lr: float  # after the lr scaling rule
    argv: list[str] = Field(default_factory=list)
    resume_path: str | None = None

    def public(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _gpu_count(parallel: ParallelSpec) -> int:
    if parallel.gpus is not None:
        return len(parallel.gpus)
    return parallel.num_gpus or 0


def _pick_strategy(parallel: ParallelSpec, world: int) -> tuple[Strategy, str]:
    if parallel.strategy is not Strategy.AUTO:
        return parallel.strategy, "chosen in the spec"
    if world > 1:
        return Strategy.DDP, f"{world} processes: DDP keeps one model replica per process"
    return Strategy.SINGLE, "one process: no parallel wrapper needed"


def scaled_lr(train: TrainSpec) -> float:
    ratio = train.batch_size / train.base_batch_size
    if train.lr_scaling is LrScaling.LINEAR:
        return train.lr * ratio
    if train.lr_scaling is LrScaling.SQRT:
        return train.lr * math.sqrt(ratio)
    return train.lr


def resolve_plan(spec: JobSpec) -> Plan:
    """Validate how the sections fit together and derive the plan; raises ValueError naming the fix."""
    parallel = spec.parallel
    gpus = _gpu_count(parallel)
    device = "cuda" if gpus else "cpu"
    if gpus and parallel.nproc_per_node not in (None, gpus):
        raise ValueError(
            f"parallel.nproc_per_node={parallel.nproc_per_node} must equal the {gpus} GPUs asked for "
            "(one process per GPU); leave it out"
        )
    world = gpus or parallel.nproc_per_node or 1
    strategy, reason = _pick_strategy(parallel, world)
    if strategy is Strategy.SINGLE and world > 1:
        raise ValueError(
            f"parallel.strategy=single runs one process but {world} were asked for; "
            "use strategy ddp or ask for one GPU/process"
        )
    if parallel.sync_batchnorm and strategy is not Strategy.DDP:
        raise ValueError("parallel.sync_batchnorm needs parallel.strategy=ddp; drop it or switch to ddp")
    if parallel.sync_batchnorm and device == "cpu":
        raise ValueError(
            "parallel.sync_batchnorm runs on GPUs only (torch's SyncBatchNorm has no CPU kernel); "
            "drop it or ask for parallel.gpus"
        )
    if device == "cpu" and spec.precision is Precision.FP16:
        raise ValueError("precision fp16 needs a GPU; on CPU use bf16 or fp32, or ask for parallel.gpus")
    train = spec.train
    shards = world * train.grad_accum_steps
    if train.batch_size % shards:
        raise ValueError(
            f"train.batch_size={train.batch_size} must divide evenly over {world} ranks x "
            f"{train.grad_accum_steps} accumulation steps; use a multiple of {shards}"
        )
    return Plan(
        strategy=strategy,
        strategy_reason=reason,
        device=device,
        backend="nccl" if device == "cuda" else "gloo",
        world_size=world,
        nproc_per_node=world,
        gpus=parallel.gpus,
        num_gpus=gpus,
        per_rank_batch=train.batch_size // world,
        micro_batch=train.batch_size // shards,
        precision=spec.precision,
        lr=scaled_lr(train),
    )


class RunConfig(BaseModel):
    """Written by the worker to runs/<job>/spec.json and read by every rank of the trainer."""

    job_id: int
    attempt: int
    spec: JobSpec
    plan: Plan

"""The train section of the spec: how the optimizer runs, and what a diverging loss does. Field-level checks
only; no torch.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from jobspec.spec_fields import ENTRY_POINT, Choice, Section


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


PositiveFloat = Annotated[float, Field(gt=0, le=1e4)]


def _finite(value: float, field: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number, got {value}")
    return value


class Loss(StrEnum):
    """The built-in losses; train.loss may also name a function of the code bundle."""

    CROSS_ENTROPY = "cross_entropy"  # classification: (input, class index) batches; reports eval_accuracy
    MSE = "mse"  # regression: (input, target) batches, targets shaped like the model's output


class OnNonFinite(StrEnum):
    """What a NaN or inf training loss does to the run."""

    FAIL = "fail"  # the job fails (reason nonfinite_loss), naming the first such step
    WARN = "warn"  # training goes on; a warning event, and nonfinite_steps counts such steps
    SKIP_STEP = "skip_step"  # no optimizer step where any rank's loss is not finite; counted the same way


class TrainSpec(Section):
    epochs: int | None = Field(None, ge=1, le=100_000)
    max_steps: int | None = Field(None, ge=1, le=10_000_000, description="optimizer steps; wins over epochs")
    max_tokens: int | None = Field(
        None,
        ge=1,
        le=10**15,
        description="token datasets, instead of max_steps: steps of train.batch_size x data.block_size "
        "tokens, rounded up",
    )
    batch_size: int = Field(64, ge=1, le=1_048_576, description="global batch: summed over all ranks")
    optimizer: Choice[Optimizer] = Field(
        Optimizer.SGD, description="embedding_bag: sgd, unless strategy fsdp (sparse gradients)"
    )
    lr: PositiveFloat = 0.05
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="sgd only; not on an embedding_bag table")
    weight_decay: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="sgd, adam: on every parameter; adamw: on weight matrices and embeddings, not on biases "
        "and norms (1-D)",
    )
    betas: list[float] = Field(
        [0.9, 0.999],
        min_length=2,
        max_length=2,
        description="adam, adamw: the moments' decay rates, like [0.9, 0.95] for a language model",
    )
    schedule: Choice[Schedule] = Schedule.CONSTANT
    step_size_epochs: int = Field(30, ge=1, le=100_000, description="schedule=step: decay period")
    gamma: float = Field(0.1, gt=0.0, le=1.0, description="schedule=step and plateau: decay factor")
    plateau_patience: int = Field(2, ge=0, le=1000, description="schedule=plateau: evaluations without gain")
    onecycle_pct_start: float = Field(0.3, gt=0.0, lt=1.0, description="schedule=onecycle: share rising")
    warmup_steps: int = Field(0, ge=0, le=1_000_000)
    min_lr: float = Field(0.0, ge=0.0, le=1e4, description="schedule=cosine: the lr it decays to")
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
    loss: str = Field(
        Loss.CROSS_ENTROPY.value,
        max_length=200,
        description="cross_entropy, mse, or 'module:function' in the code bundle: function(model, batch) -> "
        "loss or (loss, {name: metric})",
    )
    on_nonfinite: Choice[OnNonFinite] = Field(
        OnNonFinite.FAIL,
        description="a NaN or inf training loss: fail the job, warn and train on, or skip_step (its update)",
    )

    @field_validator("loss")
    @classmethod
    def known_loss(cls, loss: str) -> str:
        if loss not in set(Loss) and not ENTRY_POINT.fullmatch(loss):
            raise ValueError(
                f"unknown train.loss {loss!r}; choose {', '.join(Loss)}, or name a function of your code "
                "bundle as 'module:function', like 'models:loss'"
            )
        return loss

    @property
    def loss_function(self) -> str | None:
        """The `module:function` train.loss names in the code bundle; None for a built-in loss."""
        return None if self.loss in set(Loss) else self.loss

    @field_validator("lr")
    @classmethod
    def finite_lr(cls, lr: float) -> float:
        return _finite(lr, "train.lr")

    @field_validator("betas")
    @classmethod
    def betas_below_one(cls, betas: list[float]) -> list[float]:
        if not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"train.betas {betas} must each be at least 0 and below 1, like [0.9, 0.95]")
        return betas

    @model_validator(mode="after")
    def has_length(self) -> TrainSpec:
        if self.max_steps is not None and self.max_tokens is not None:
            raise ValueError("set train.max_steps or train.max_tokens, not both")
        if self.epochs is None and self.max_steps is None and self.max_tokens is None:
            self.epochs = 1
        return self

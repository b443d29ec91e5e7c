"""What a sweep asks for (POST /v1/sweeps): a base job spec, a search space of dotted paths into it, the
objective, and how Optuna samples and prunes. Stored as given on the sweep's row; the API and the worker both
read it back through this model."""

from __future__ import annotations

import copy
import math
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

MAX_TRIALS = 1000  # each ask rebuilds the study from every trial's reports: the cost grows with trials
MAX_GRID_POINTS = 1000
# What a stored sweep may hold; TRAINYARD_SWEEP_MAX_CHOICES may only lower it for new sweeps.
MAX_CHOICES = 1000
# Optuna's samplers draw ints through floats, and a float tells whole numbers apart only up to 2**53: a range
# or a count of steps beyond it would sample values outside the space or no distinct points.
MAX_EXACT = 2**53
Path = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_\-]+)+$", max_length=200)]

if TYPE_CHECKING:
    from core.models import Sweep


class Goal(StrEnum):
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class SamplerName(StrEnum):
    TPE = "tpe"
    RANDOM = "random"
    GRID = "grid"


class PrunerName(StrEnum):
    ASHA = "asha"
    MEDIAN = "median"
    NONE = "none"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Numbers keep their JSON type, as in a job spec: "1e-3" or true is no bound.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Whole = Annotated[int, Field(strict=True, ge=-MAX_EXACT, le=MAX_EXACT)]


class FloatParam(_Strict):
    type: Literal["float"]
    low: Number
    high: Number
    log: bool = False
    step: Number | None = Field(None, gt=0, description="linear steps from low; the grid's points")
    grid_points: int | None = Field(
        None,
        ge=2,
        le=MAX_GRID_POINTS,
        description="for sampler grid: this many points, low and high included",
    )

    @field_validator("step")
    @classmethod
    def countable(cls, step: float | None, info: ValidationInfo) -> float | None:
        """The steps are counted (`points`), never listed: their count must be a float's whole number."""
        low, high = info.data.get("low"), info.data.get("high")
        if step is None or low is None or high is None:
            return step
        if not (high - low) / step <= MAX_EXACT:  # also an overflow to inf
            raise ValueError(
                f"{step} cuts high - low ({high} - {low}) into more than 2**53 steps, more points than "
                "floats tell apart; raise step or narrow the range"
            )
        return step

    @model_validator(mode="after")
    def bounded(self) -> FloatParam:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if not math.isfinite(self.high - self.low):
            raise ValueError(f"high - low ({self.high} - {self.low}) overflows a float; narrow the range")
        if self.log and self.low <= 0:
            raise ValueError(f"a log scale needs low > 0 (got {self.low}); raise low or set log false")
        if self.log and not math.isfinite(self.high / self.low):
            raise ValueError(f"high / low ({self.high} / {self.low}) overflows a float; narrow the range")
        if self.log and self.step is not None:
            raise ValueError("step and log cannot go together; drop one (grid_points grids a log scale)")
        return self

    def _steps(self, step: float) -> int:
        return math.floor((self.high - self.low) / step + 1e-9)

    def points(self) -> int | None:
        """How many values a grid takes, counted: every step, or grid_points; None when neither is given."""
        return self.grid_points if self.step is None else self._steps(self.step) + 1

    def grid(self) -> list[float]:
        """Evenly spaced (geometrically under log) points, or every step. Only for a grid, whose size was
        capped at the sweep's creation."""
        count = self.points()
        if count is None:
            raise ValueError("a float's grid needs step or grid_points")
        if self.step is not None:
            return [self.low + i * self.step for i in range(count)]
        n = count - 1
        if self.log:
            ratio = self.high / self.low
            inner = [self.low * ratio ** (i / n) for i in range(1, n)]
        else:
            inner = [self.low + (self.high - self.low) * i / n for i in range(1, n)]
        # The ends exactly: a rounded high would fall outside the range Optuna checks values against.
        return [self.low, *inner, self.high]

    @property
    def corners(self) -> tuple[float, float]:
        return self.low, self.top

    @property
    def top(self) -> float:
        """The highest value a trial can take: high, or the last whole step below it (the grid's end)."""
        return self.high if self.step is None else self.low + self._steps(self.step) * self.step


class IntParam(_Strict):
    type: Literal["int"]
    low: Whole
    high: Whole
    step: int = Field(1, strict=True, ge=1, le=MAX_EXACT)
    log: bool = False

    @model_validator(mode="after")
    def bounded(self) -> IntParam:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and (self.low < 1 or self.step != 1):
            raise ValueError("a log scale needs low >= 1 and step 1")
        return self

    def points(self) -> int:
        return (self.high - self.low) // self.step + 1

    def grid(self) -> list[int]:
        """Every value; only for a grid, whose size was capped at the sweep's creation."""
        return list(range(self.low, self.top + 1, self.step))

    @property
    def corners(self) -> tuple[int, int]:
        return self.low, self.top

    @property
    def top(self) -> int:
        """The highest value a trial can take: high, or the last whole step below it."""
        return self.low + (self.points() - 1) * self.step


class CategoricalParam(_Strict):
    type: Literal["categorical"]
    choices: list[StrictStr | StrictBool | StrictInt | Number] = Field(min_length=1, max_length=MAX_CHOICES)

    def points(self) -> int:
        return len(self.choices)

    def grid(self) -> list[str | int | float | bool]:
        return list(self.choices)

    @property
    def corners(self) -> tuple[Any, Any]:
        return self.choices[0], self.choices[-1]


Param = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class Objective(_Strict):
    metric: str = Field(min_length=1, max_length=64, description="a metric every trial reports: eval_loss")
    goal: Goal = Goal.MINIMIZE


class AshaOptions(_Strict):
    """Optuna's SuccessiveHalvingPruner: rungs at min_resource * reduction_factor**(rate + rung) steps."""

    min_resource: int | Literal["auto"] = "auto"
    reduction_factor: int = Field(4, ge=2, le=100)
    min_early_stopping_rate: int = Field(0, ge=0, le=100)
    bootstrap_count: int = Field(0, ge=0, le=MAX_TRIALS)


class MedianOptions(_Strict):
    """Optuna's MedianPruner: below the median of earlier trials at the same step."""

    n_startup_trials: int = Field(5, ge=0, le=MAX_TRIALS)
    n_warmup_steps: int = Field(0, ge=0)
    interval_steps: int = Field(1, ge=1)
    n_min_trials: int = Field(1, ge=1, le=MAX_TRIALS)


class NoOptions(_Strict):
    pass


PRUNER_OPTIONS: dict[PrunerName, type[_Strict]] = {
    PrunerName.ASHA: AshaOptions,
    PrunerName.MEDIAN: MedianOptions,
    PrunerName.NONE: NoOptions,
}


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    spec: dict[str, JsonValue] = Field(
        description="a job spec, as POST /v1/jobs takes; each trial sets its parameters in a copy of it"
    )
    parameters: dict[Path, Param] = Field(
        min_length=1,
        max_length=64,
        description="dotted paths into spec: train.lr, model.kwargs.hidden, program.hyperparameters.<key>",
    )
    objective: Objective
    max_trials: int = Field(16, ge=1, le=MAX_TRIALS)
    parallel: int = Field(1, ge=1, le=64, description="trials that run at once")
    sampler: SamplerName = SamplerName.TPE
    pruner: PrunerName = PrunerName.ASHA
    pruner_options: dict[str, JsonValue] = Field(default_factory=dict, description="the pruner's knobs")
    seed: int = Field(0, ge=0, le=2**31 - 1)

    @model_validator(mode="after")
    def options_fit(self) -> SweepSpec:
        PRUNER_OPTIONS[self.pruner].model_validate(self.pruner_options)
        if self.sampler is SamplerName.GRID:
            size = math.prod(self.grid_counts().values())  # Python's ints: exact at any size
            if size < self.max_trials:
                raise ValueError(
                    f"max_trials={self.max_trials} is more than the grid's {size} points; set max_trials to "
                    f"{size} or fewer"
                )
        return self

    def options(self) -> Any:
        return PRUNER_OPTIONS[self.pruner].model_validate(self.pruner_options)

    def grid_counts(self) -> dict[str, int]:
        """Each parameter's number of grid points, for sampler grid, counted rather than listed: a float
        needs step or grid_points."""
        counts: dict[str, int] = {}
        for path, param in self.parameters.items():
            count = param.points()
            if count is None:
                raise ValueError(
                    f"parameters.{path}: sampler grid needs a float's points; give step (linear) or "
                    "grid_points (geometric under log)"
                )
            counts[path] = count
        return counts

    def grid(self) -> dict[str, list[Any]]:
        """Every parameter's grid points, listed for Optuna's GridSampler, which lists their product too: only
        for a sweep whose grid was capped at its creation (TRAINYARD_SWEEP_MAX_GRID_POINTS)."""
        return {path: param.grid() for path, param in self.parameters.items()}

    def corners(self, limit: int) -> list[dict[str, Any]]:
        """At most `limit` (2 or more) sets of parameter values to plan a new sweep's spec at: all lows, all
        highs, then the categorical choices between their ends, a parameter's next one at a time in turn.
        Planning costs milliseconds a set and a body may hold 64 parameters of 1000 choices, so not every
        choice is planned: the ends are where a value breaks a job (a size too large, a switch off), and
        taking the parameters in turn covers the short lists (an optimizer, a strategy) before the long
        ones' middles. A choice left unplanned that cannot run fails its own trial, saying why."""
        lows = {path: param.corners[0] for path, param in self.parameters.items()}
        highs = {path: param.corners[1] for path, param in self.parameters.items()}
        inner = [
            (path, param.choices[1:-1])
            for path, param in self.parameters.items()
            if isinstance(param, CategoricalParam)
        ]
        found = [lows, highs]
        for depth in range(max((len(choices) for _, choices in inner), default=0)):
            for path, choices in inner:
                if len(found) >= limit:
                    return found
                if depth < len(choices):
                    found.append(lows | {path: choices[depth]})
        return found


def trial_spec(base: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A copy of `base` with each dotted path set to its value; sections the path needs are made."""
    spec = copy.deepcopy(base)
    for path, value in params.items():
        *parents, leaf = path.split(".")
        node = spec
        for key in parents:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[leaf] = value
    return spec


def config(sweep: Sweep) -> SweepSpec:
    """A stored sweep's request, as it was accepted."""
    return SweepSpec.model_validate(sweep.config)

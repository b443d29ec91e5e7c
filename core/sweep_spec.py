"""What a sweep asks for (POST /v1/sweeps): a base job spec, a search space of dotted paths into it, the
objective, and how Optuna samples and prunes. Stored as given on the sweep's row; the API and the worker both
read it back through this model."""

from __future__ import annotations

import copy
import math
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

MAX_TRIALS = 1000  # each ask rebuilds the study from every trial's reports: the cost grows with trials
MAX_GRID_POINTS = 1000
Path = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_\-]+)+$", max_length=200)]


class Goal(StrEnum):
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class TrialState(StrEnum):
    """Optuna's trial states, as the API shows them: RUNNING, COMPLETE, PRUNED, FAIL."""

    RUNNING = "running"
    COMPLETED = "completed"
    PRUNED = "pruned"
    FAILED = "failed"


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
Number = Annotated[float, Field(strict=True)]
Whole = Annotated[int, Field(strict=True)]


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

    @model_validator(mode="after")
    def bounded(self) -> FloatParam:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"a log scale needs low > 0 (got {self.low}); raise low or set log false")
        if self.log and self.step is not None:
            raise ValueError("step and log cannot go together; drop one (grid_points grids a log scale)")
        return self

    def grid(self) -> list[float] | None:
        """Evenly spaced (geometrically under log) points, or every step; None when neither is given."""
        if self.step is not None:
            count = math.floor((self.high - self.low) / self.step + 1e-9) + 1
            return [self.low + i * self.step for i in range(count)]
        if self.grid_points is None:
            return None
        n = self.grid_points - 1
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
        """The highest value a trial can take: high, or the last whole step below it."""
        points = self.grid() if self.step is not None else None
        return self.high if points is None else points[-1]


class IntParam(_Strict):
    type: Literal["int"]
    low: Whole
    high: Whole
    step: Whole = Field(1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def bounded(self) -> IntParam:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and (self.low < 1 or self.step != 1):
            raise ValueError("a log scale needs low >= 1 and step 1")
        return self

    def grid(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))

    @property
    def corners(self) -> tuple[int, int]:
        return self.low, self.grid()[-1]


class CategoricalParam(_Strict):
    type: Literal["categorical"]
    choices: list[StrictStr | StrictBool | StrictInt | StrictFloat] = Field(
        min_length=1, max_length=MAX_GRID_POINTS
    )

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
            self.grid()
        return self

    def options(self) -> Any:
        return PRUNER_OPTIONS[self.pruner].model_validate(self.pruner_options)

    def grid(self) -> dict[str, list[Any]]:
        """Every parameter's grid points, for sampler grid; a float needs step or grid_points."""
        grid: dict[str, list[Any]] = {}
        for path, param in self.parameters.items():
            points = param.grid()
            if points is None:
                raise ValueError(
                    f"parameters.{path}: sampler grid needs a float's points; give step (linear) or "
                    "grid_points (geometric under log)"
                )
            grid[path] = points
        size = math.prod(len(points) for points in grid.values())
        if size < self.max_trials:
            raise ValueError(
                f"max_trials={self.max_trials} is more than the grid's {size} points; set max_trials to "
                f"{size} or fewer"
            )
        return grid

    def corners(self) -> list[dict[str, Any]]:
        """Parameter values that bound the space: all lows, all highs, and each categorical choice once, so
        that a space that cannot make a valid trial is refused at creation."""
        lows = {path: param.corners[0] for path, param in self.parameters.items()}
        highs = {path: param.corners[1] for path, param in self.parameters.items()}
        corners = [lows, highs]
        for path, param in self.parameters.items():
            if isinstance(param, CategoricalParam):
                corners += [lows | {path: choice} for choice in param.choices[1:-1]]
        return corners


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

"""A job's forecast as the service shows it (plan.forecast; issue 44): its busiest device's peak memory, the
memory that device has, the step's and the job's time, whether it fits, and on what the figures rest. Made by
trainers/forecast/ (which needs torch); this is its torch-free shape, which the API and the CLI read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, Field

# The forecaster process's first line, once it has its imports (trainers/forecast/__main__.py): from then on
# the API's forecaster (app/services/forecasts.py) sends it requests.
FORECASTER_READY = "ready"
# The CPUs the forecaster may use: its API process keeps its own threads on one (app/cpu_pin.py), which the
# forecaster, started from one of them, would otherwise inherit.
FORECASTER_CPUS_ENV = "TRAINYARD_FORECASTER_CPUS"


class Forecast(BaseModel):
    # Per device: per GPU for GPU jobs, as torch.cuda.max_memory_reserved would read it; per rank's process
    # for CPU jobs.
    peak_memory_bytes: int
    device_memory_bytes: int | None = None  # what the device has, from the workers' inventory
    step_time_s: float
    job_time_s: float | None = None  # None when the job's length in steps is not known before it runs
    fits: bool
    basis: str  # which calibration the figures rest on, and how many runs
    breakdown: dict[str, int | float | str] = Field(default_factory=dict)
    # Filled in once the job has run: what it did.
    measured_peak_memory_bytes: int | None = None
    measured_step_time_s: float | None = None


# What a forecast's step time was computed for, in its breakdown: the learned calibration
# (app/services/forecast_learning.py) scales a forecast by the runs of the same key. A forecast so scaled
# keeps the table's own figure, which later runs are compared with, so that a factor never learns from itself.
GPU_MODEL, MODEL_KIND, EXECUTION = "gpu_model", "model_kind", "execution"
# What a CPU job's key names in GPU_MODEL's place: its runs learn together, whichever host ran them.
CPU_DEVICE = "CPU"
TABLE_STEP_TIME = "table_step_time_s"


class Execution(StrEnum):
    COMPILED = "compiled"
    EAGER = "eager"


@dataclass(frozen=True)
class StepKey:
    """What a measured step time says something about: the GPU model (CPU_DEVICE for a CPU job), the kind
    of model, compiled or not."""

    gpu_model: str
    model_kind: str
    execution: str

    def __str__(self) -> str:
        return f"{self.model_kind}, {self.execution}, on {self.gpu_model}"


def step_key(breakdown: Mapping[str, object]) -> StepKey | None:
    """The key of a job's forecast; None for one made before forecasts named it."""
    parts = (breakdown.get(GPU_MODEL), breakdown.get(MODEL_KIND), breakdown.get(EXECUTION))
    if not all(isinstance(part, str) and part for part in parts):
        return None
    return StepKey(*(str(part) for part in parts))


def table_step_time(forecast: Mapping[str, object]) -> float | None:
    """The step time the fitted table gave, before any learned factor (a stored forecast as JSON)."""
    breakdown = forecast.get("breakdown")
    table = breakdown.get(TABLE_STEP_TIME) if isinstance(breakdown, Mapping) else None
    figure = table if table is not None else forecast.get("step_time_s")
    return float(figure) if isinstance(figure, int | float) and figure > 0 else None

"""A job's forecast as the service shows it (plan.forecast; issue 44): its busiest device's peak memory, the
memory that device has, the step's and the job's time, whether it fits, and on what the figures rest. Made by
trainers/forecast/ (which needs torch); this is its torch-free shape, which the API and the CLI read."""

from __future__ import annotations

from pydantic import BaseModel, Field

# The forecaster process's first line, once it has its imports (trainers/forecast/__main__.py): from then on
# the API's forecaster (app/services/forecasts.py) sends it requests.
FORECASTER_READY = "ready"


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

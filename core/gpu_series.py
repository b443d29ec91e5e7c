"""The GPU telemetry a worker samples for each job (worker/executors/local/telemetry.py), as metric series of
the job: one name per quantity and GPU, `gpu_util/1`, which the API charts, exports to Prometheus and
compares."""

from __future__ import annotations

from enum import StrEnum


class GpuQuantity(StrEnum):
    UTIL = "gpu_util"  # % of the sample period a kernel ran
    MEMORY = "gpu_mem_mb"
    POWER = "gpu_power_w"
    TEMPERATURE = "gpu_temp_c"
    SM_CLOCK = "gpu_sm_mhz"


# Each quantity's Prometheus gauge: name and help.
GAUGES: dict[GpuQuantity, tuple[str, str]] = {
    GpuQuantity.UTIL: ("trainyard_job_gpu_utilization_percent", "Utilisation of a job's GPU (NVML)"),
    GpuQuantity.MEMORY: ("trainyard_job_gpu_memory_used_megabytes", "GPU memory in use on a job's GPU"),
    GpuQuantity.POWER: ("trainyard_job_gpu_power_watts", "Power drawn by a job's GPU"),
    GpuQuantity.TEMPERATURE: ("trainyard_job_gpu_temperature_celsius", "Temperature of a job's GPU"),
    GpuQuantity.SM_CLOCK: ("trainyard_job_gpu_sm_clock_megahertz", "SM clock of a job's GPU"),
}


def series_name(quantity: GpuQuantity, gpu: str) -> str:
    return f"{quantity}/{gpu}"


def split_series(name: str) -> tuple[GpuQuantity, str] | None:
    """The quantity and GPU of a telemetry series name; None for any other metric."""
    quantity, slash, gpu = name.partition("/")
    known = {member.value: member for member in GpuQuantity}
    return (known[quantity], gpu) if slash and quantity in known else None

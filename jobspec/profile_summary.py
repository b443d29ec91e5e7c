"""What a profiled job leaves in runs/<job>/profile/: the summary's schema, shared by the trainer that
writes it and the API that serves it. No torch import."""

from __future__ import annotations

from pydantic import BaseModel, Field

PROFILE_DIR = "profile"
SUMMARY_FILE = "summary.json"
TRACE_FILE = "trace.json"


class OpTime(BaseModel):
    name: str
    calls: int
    self_us: float = Field(description="time in this op itself, not in the ops it called")


class CopyTimes(BaseModel):
    """GPU time of host<->device copies, by direction."""

    htod_us: float = 0.0
    dtoh_us: float = 0.0
    dtod_us: float = 0.0

    @property
    def total_us(self) -> float:
        return self.htod_us + self.dtoh_us + self.dtod_us


class ProfileSummary(BaseModel):
    first_step: int = Field(description="the first profiled optimizer step (1-based)")
    steps: int = Field(description="optimizer steps profiled")
    device: str
    step_wall_us: float = Field(description="mean wall time of a profiled step, as the host saw it")
    cpu_total_us: float = Field(description="self CPU time of every op over the profiled steps")
    gpu_total_us: float = Field(description="GPU time of every kernel, copy and memset; 0 on CPU")
    top_cpu_ops: list[OpTime]
    top_gpu_ops: list[OpTime]
    memcpy: CopyTimes
    memcpy_share_of_gpu: float = Field(description="share of GPU time spent copying between host and device")
    sync_ops: list[OpTime] = Field(
        description="calls that make the host wait for the GPU: blocking cudaMemcpy, stream/device/event "
        "synchronize, and .item() (aten::item, aten::_local_scalar_dense)"
    )
    sync_share_of_cpu: float = Field(description="share of CPU time spent in those calls")
    trace_file: str = Field(description="Chrome trace (chrome://tracing, Perfetto), relative to the run dir")

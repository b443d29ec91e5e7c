"""torch.profiler on rank 0 for profile.steps steps after profile.skip_first, written as a Chrome trace
and a summary in the spirit of Paddle's profiler report: where CPU and GPU time went, how much of it was
host<->device copies, and how often the host stopped to wait for the GPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEventAvg
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

from jobspec.events import ProfileEvent
from jobspec.profile_summary import (
    PROFILE_DIR,
    SUMMARY_FILE,
    TRACE_FILE,
    CopyTimes,
    OpTime,
    ProfileSummary,
)
from jobspec.spec import ProfileSpec
from trainers.dist_env import DistEnv
from trainers.metrics import EventLog

TOP_OPS = 15
STEP_MARKER = "ProfilerStep*"
SYNC_OPS = frozenset(
    {
        "cudaMemcpy",  # the blocking one; cudaMemcpyAsync is not listed
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "aten::item",
        "aten::_local_scalar_dense",
    }
)
_COPY_DIRECTIONS = {"Memcpy HtoD": "htod_us", "Memcpy DtoH": "dtoh_us", "Memcpy DtoD": "dtod_us"}


def profiler_schedule(spec: ProfileSpec) -> Callable[[int], ProfilerAction]:
    # The last skipped step doubles as the profiler's warm-up, which keeps its start-up cost out of the
    # profiled steps.
    warmup = min(1, spec.skip_first)
    return schedule(skip_first=spec.skip_first - warmup, wait=0, warmup=warmup, active=spec.steps, repeat=1)


def _on_device(event: FunctionEventAvg) -> bool:
    """Kernels, copies and memsets; the CPU ops that launched them carry the same time again."""
    return event.device_type != DeviceType.CPU and not event.is_user_annotation


def _top(events: list[FunctionEventAvg], device: bool) -> list[OpTime]:
    def self_us(event: FunctionEventAvg) -> float:
        return event.self_device_time_total if device else event.self_cpu_time_total

    ranked = sorted(events, key=self_us, reverse=True)[:TOP_OPS]
    return [OpTime(name=e.key or "", calls=e.count, self_us=self_us(e)) for e in ranked if self_us(e) > 0]


def _copy_times(device_events: list[FunctionEventAvg]) -> CopyTimes:
    times = CopyTimes()
    for event in device_events:
        for prefix, field in _COPY_DIRECTIONS.items():
            if (event.key or "").startswith(prefix):
                setattr(times, field, getattr(times, field) + event.self_device_time_total)
    return times


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def summarize(
    averages: list[FunctionEventAvg], first_step: int, steps: int, device: torch.device
) -> ProfileSummary:
    """Summary of profile.key_averages() over `steps` steps; times in microseconds."""
    markers = [e for e in averages if e.key == STEP_MARKER]
    ops = [e for e in averages if e.key != STEP_MARKER]
    device_events = [e for e in ops if _on_device(e)]
    host_ops = [e for e in ops if not _on_device(e)]
    cpu_total = sum(e.self_cpu_time_total for e in averages)
    gpu_total = sum(e.self_device_time_total for e in device_events)
    copies = _copy_times(device_events)
    syncs = _top([e for e in host_ops if e.key in SYNC_OPS], device=False)
    return ProfileSummary(
        first_step=first_step,
        steps=steps,
        device=device.type,
        # Stopping early adds a last, almost empty step marker; dividing by the steps taken ignores it.
        step_wall_us=_share(sum(e.cpu_time_total for e in markers), steps),
        cpu_total_us=cpu_total,
        gpu_total_us=gpu_total,
        top_cpu_ops=_top(host_ops, device=False),
        top_gpu_ops=_top(device_events, device=True),
        memcpy=copies,
        memcpy_share_of_gpu=_share(copies.total_us, gpu_total),
        sync_ops=syncs,
        sync_share_of_cpu=_share(sum(op.self_us for op in syncs), cpu_total),
        trace_file=f"{PROFILE_DIR}/{TRACE_FILE}",
    )


class StepProfiler:
    """Every rank holds one so the loop needs no rank checks; only rank 0's records, once."""

    def __init__(self, spec: ProfileSpec, run_dir: Path, env: DistEnv, events: EventLog, done: int) -> None:
        self.directory = run_dir / PROFILE_DIR
        self.device = env.device
        self.events = events
        self.first_step = done + spec.skip_first + 1  # steps are counted across resumes
        self.spec = spec
        self.steps_taken = 0
        self._profile: profile | None = None
        if spec.steps > 0 and env.is_main:
            activities = [ProfilerActivity.CPU]
            if env.device.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            self._profile = profile(
                activities=activities, schedule=profiler_schedule(spec), on_trace_ready=self._write
            )
            self._profile.start()

    def step(self) -> None:
        """Call after each optimizer step."""
        if self._profile is not None:
            self.steps_taken += 1
            self._profile.step()

    def _write(self, prof: profile) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.directory / TRACE_FILE))
        profiled = min(self.spec.steps, max(0, self.steps_taken - self.spec.skip_first))
        summary = summarize(list(prof.key_averages()), self.first_step, profiled, self.device)
        (self.directory / SUMMARY_FILE).write_text(summary.model_dump_json(indent=1), encoding="utf-8")
        self.events.append(
            ProfileEvent(
                first_step=summary.first_step,
                steps=summary.steps,
                summary=f"{PROFILE_DIR}/{SUMMARY_FILE}",
                trace=summary.trace_file,
            )
        )

    def close(self) -> None:
        """Stop; a run shorter than skip_first + steps still writes what it profiled."""
        if self._profile is not None:
            self._profile.stop()
            self._profile = None

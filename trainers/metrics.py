"""Training metrics kept on the device between reports, and the event log rank 0 writes them to."""

from __future__ import annotations

import resource
import threading
import time
from pathlib import Path

import torch
from pydantic import BaseModel

from trainers.events import EVENTS_FILE, append_event
from trainers.objectives import LossValues
from trainers.strategies.base import ParallelStrategy


class EventLog:
    """Every rank holds one so callers need no rank checks; only rank 0's writes. The checkpoint writer
    thread appends too, so lines never interleave."""

    def __init__(self, run_dir: Path, enabled: bool) -> None:
        self.path = run_dir / EVENTS_FILE
        self.enabled = enabled
        self._lock = threading.Lock()

    def append(self, event: BaseModel) -> None:
        if self.enabled:
            with self._lock:
                append_event(self.path, event)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class TrainMetrics:
    """Sums of loss, the loss function's own metrics and samples since the last report, as device tensors:
    adding to them never waits. Metrics are weighted by samples, as the loss is."""

    def __init__(self, strategy: ParallelStrategy, device: torch.device, start_step: int) -> None:
        self.strategy = strategy
        self.device = device
        self._reset(start_step)

    def _reset(self, step: int) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.samples = torch.zeros((), dtype=torch.float64, device=self.device)
        self.metric_sums: dict[str, torch.Tensor] = {}
        self.since_step = step
        self.since_time = time.perf_counter()

    def add(self, values: LossValues, samples: int) -> None:
        # The loss lives where the model's last stage runs (model_parallel, pipeline), maybe not on this
        # rank's device; the copy between GPUs is queued on the stream, not a host sync.
        self.loss_sum += values.loss.to(self.device, torch.float64) * samples
        self.samples += samples
        for name, value in values.metrics.items():
            weighted = value.to(self.device, torch.float64) * samples  # a new tensor: summing into it is safe
            if name in self.metric_sums:
                self.metric_sums[name] += weighted
            else:
                self.metric_sums[name] = weighted

    def report(self, step: int, lr: float) -> dict[str, float]:
        """The window's totals over the job (a collective: every rank calls it at the same step), then a
        new window."""
        names = sorted(self.metric_sums)
        sums = [self.loss_sum, self.samples, *(self.metric_sums[name] for name in names)]
        totals = self.strategy.reduce_metrics(torch.stack(sums))
        # .tolist() is the host sync that waits for the window's work, so wall time covers all of it.
        loss_sum, samples, *metric_sums = totals.tolist()
        elapsed = time.perf_counter() - self.since_time
        steps = step - self.since_step
        values = {
            "loss": loss_sum / samples,
            "lr": lr,
            "samples_per_s": samples / elapsed,
            "step_time_s": elapsed / steps,
            "peak_mem_mb": peak_memory_mb(self.device),
            **{name: total / samples for name, total in zip(names, metric_sums, strict=True)},
        }
        self._reset(step)
        return values

"""Training metrics kept on the device between reports, and the event log rank 0 writes them to."""

from __future__ import annotations

import math
import resource
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import BaseModel

from jobspec.events import EVENTS_FILE, append_event
from trainers.data.batches import Counts
from trainers.lm import Throughput
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


def reserved_memory_mb(device: torch.device) -> dict[str, float]:
    """What the caching allocator has held at most: what the device lost to this rank, which a forecast
    predicts (trainers/forecast/); a GPU's alone."""
    if device.type != "cuda":
        return {}
    return {"peak_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20}


@dataclass(frozen=True)
class Report:
    """A window's totals over the job, and its steps whose loss was not finite on some rank."""

    values: dict[str, float]
    nonfinite_steps: list[int]


class TrainMetrics:
    """Sums of loss, the loss function's own metrics and samples since the last report, as device tensors:
    adding to them never waits. Metrics are weighted by samples, as the loss is. `window` is the most steps
    between two reports (metrics.every_n_steps). `counts` gives running counts of this rank (the data's bad
    samples), reported summed over the ranks. A language model's `throughput` adds tokens_per_s and mfu,
    from the same window's samples and wall time: no extra host sync."""

    def __init__(
        self,
        strategy: ParallelStrategy,
        device: torch.device,
        start_step: int,
        window: int,
        counts: Counts | None = None,
        throughput: Throughput | None = None,
    ) -> None:
        self.strategy = strategy
        self.device = device
        self.window = window
        self.counts = counts
        self.throughput = throughput
        self._reset(start_step)

    def _reset(self, step: int) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.samples = torch.zeros((), dtype=torch.float64, device=self.device)
        self.metric_sums: dict[str, torch.Tensor] = {}
        # A flag per step of the window, summed over ranks by the report's own all-reduce: every rank learns
        # which steps went bad on any rank, with no collective or host sync per step.
        self.nonfinite = torch.zeros(self.window, dtype=torch.float64, device=self.device)
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

    def flag(self, step: int, nonfinite: torch.Tensor) -> None:
        """Whether this rank's loss at `step` was not finite: a boolean on the device, read at the report."""
        self.nonfinite[step - self.since_step - 1] = nonfinite

    def report(self, step: int, lr: float) -> Report:
        """The window's totals over the job (a collective: every rank calls it at the same step), then a
        new window."""
        names = sorted(self.metric_sums)
        sums = torch.stack([self.loss_sum, self.samples, *(self.metric_sums[name] for name in names)])
        counted = self.counts() if self.counts else {}
        counts = torch.tensor([float(counted[name]) for name in sorted(counted)], dtype=torch.float64)
        totals = self.strategy.reduce_metrics(torch.cat([sums, counts.to(self.device), self.nonfinite]))
        # .tolist() is the host sync that waits for the window's work, so wall time covers all of it.
        loss_sum, samples, *rest = totals.tolist()
        metric_sums, flags = rest[: len(names)], rest[len(names) + len(counted) :]
        count_totals = dict(zip(sorted(counted), rest[len(names) : len(names) + len(counted)], strict=True))
        elapsed = time.perf_counter() - self.since_time
        steps = step - self.since_step

        def mean(total: float) -> float:
            # No sample counts when skip_step skipped every step of the window.
            return total / samples if samples else math.nan

        values = {
            "loss": mean(loss_sum),
            "lr": lr,
            "samples_per_s": samples / elapsed,
            "step_time_s": elapsed / steps,
            "peak_mem_mb": peak_memory_mb(self.device),
            **reserved_memory_mb(self.device),
            **{name: mean(total) for name, total in zip(names, metric_sums, strict=True)},
            **count_totals,
            **(self.throughput.values(samples / elapsed) if self.throughput else {}),
        }
        nonfinite = [self.since_step + 1 + i for i, flag in enumerate(flags[:steps]) if flag]
        self._reset(step)
        return Report(values, nonfinite)

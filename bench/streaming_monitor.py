"""What bench.streaming samples while a variant runs: the CPU cores busy machine-wide (/proc/stat: the loader
workers and the training process) and GPU 0's utilisation (nvidia-smi), twice a second, in a thread."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Monitor:
    """Machine-wide CPU cores busy and GPU 0's utilisation, sampled in a thread: (time, cores, gpu %)."""

    gpu: bool
    samples: list[tuple[float, float, float | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        busy, total = _cpu_jiffies()
        while not self.stop.wait(0.5):
            now_busy, now_total = _cpu_jiffies()
            cores = (now_busy - busy) / max(now_total - total, 1) * (os.cpu_count() or 1)
            self.samples.append((time.time(), cores, _gpu_percent() if self.gpu else None))
            busy, total = now_busy, now_total

    def mean(self, window: tuple[float, float] | None) -> tuple[float | None, float | None]:
        inside = [s for s in self.samples if window and window[0] <= s[0] <= window[1]]
        if not inside:
            return None, None
        gpu = [g for _, _, g in inside if g is not None]
        return sum(c for _, c, _ in inside) / len(inside), (sum(gpu) / len(gpu) if gpu else None)


def _cpu_jiffies() -> tuple[int, int]:
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(fields) - fields[3] - fields[4], sum(fields)  # busy: all but idle and iowait


def _gpu_percent() -> float | None:
    query = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-i", "0"]
    try:
        return float(subprocess.run(query, capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None

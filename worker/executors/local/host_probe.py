"""What one tiny eager CUDA operation costs this host's side (trainers/forecast/host_probe.py), measured once
at the worker's start and reported with its GPUs (reaper.py's beat), where the API's forecast reads it
(app/services/forecasts.py's target_for): an eager step bound by its host moves with it from one machine to
the next. It runs in a short process of its own, on a thread of its own, so the heartbeats go on meanwhile:
the worker and its standby factory never create a CUDA context themselves (the factory forks ranks). On a host
without GPUs, or with a fake inventory, nothing runs; a probe that fails or times out is absent, and says why
in the log."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

from core.config import Settings
from core.launch import inherited
from core.project import PROJECT_ROOT
from worker.gpus import GpuInfo, host_gpus

log = logging.getLogger(__name__)

PROBE_MODULE = "trainers.forecast.host_probe"
# torch's import and a CUDA context: seconds on an idle GPU host, a minute on a loaded one.
PROBE_TIMEOUT_S = 120.0


def probe_argv() -> list[str]:
    return [sys.executable, "-m", PROBE_MODULE]


def gpus_to_probe(settings: Settings) -> list[GpuInfo]:
    """The GPUs this worker may lease: none with a fake inventory, which has no GPU behind it."""
    return [] if settings.gpu_inventory is not None else host_gpus(settings)


def probe_host_op_s(gpus: list[GpuInfo]) -> float | None:
    """Seconds per tiny eager operation, on the least used of `gpus`; None without GPUs (nothing runs) or
    where the probe failed or timed out. The least used: the probe's CUDA context takes memory for its
    seconds, and a job that outlived the worker's last run may be training on the others."""
    if not gpus:
        return None
    idlest = min(gpus, key=lambda gpu: gpu.memory_used_mb)
    env = {
        **inherited(os.environ),
        # Physical ids in PCI order, as a job's ranks see them (core/launch.py's launch_env).
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": str(idlest.index),
    }
    try:
        done = subprocess.run(
            probe_argv(),
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        log.warning("the host probe took over %g s; forecasts use the calibration's host", PROBE_TIMEOUT_S)
        return None
    except OSError as error:
        log.warning("the host probe could not start (%s); forecasts use the calibration's host", error)
        return None
    return _read(done)


def _read(done: subprocess.CompletedProcess[str]) -> float | None:
    lines = done.stdout.split()
    try:
        op_s = float(lines[-1]) if done.returncode == 0 and lines else None
    except ValueError:
        op_s = None
    if op_s is None or not op_s > 0:
        said = (done.stderr.strip() or done.stdout.strip())[-500:]
        log.warning(
            "the host probe failed (exit %s: %s); forecasts use the calibration's host", done.returncode, said
        )
        return None
    log.info("this host spends %.1f us on an eager CUDA operation", op_s * 1e6)
    return op_s


class HostProbe(threading.Thread):
    """The probe of `gpus`, once; `op_s` is None until it has answered, and after a failed one."""

    def __init__(self, gpus: list[GpuInfo]) -> None:
        super().__init__(name="trainyard-host-probe", daemon=True)
        self.gpus = gpus
        self.op_s: float | None = None

    def run(self) -> None:
        self.op_s = probe_host_op_s(self.gpus)

"""The benches' trainer runs, launched as tests/integration/trainer_helpers.py launches them; a CPU run
(--smoke) starts warm.

A CPU run goes through the session's warm standby, but only once the standby factory has imported torch and
the trainer: the first run of a bench process came before that and started cold, its torchrun and its rank
each importing torch anew while the factory's own imports, under way beside them, went to waste. Waiting for
the standby costs a --smoke run none of that; a GPU run starts cold either way, as the GPU tests time it.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.integration.trainer_helpers import launch, warm_launcher


def launch_run(
    run_dir: Path, nproc: int, timeout: float, cuda_devices: str = ""
) -> subprocess.CompletedProcess[str]:
    """trainer_helpers.launch, on the CPU (cuda_devices empty) once the first standby is forked; the wait
    counts against `timeout`. (A factory that dies forks none, and the run starts cold, as before.)"""
    if not cuda_devices:
        started = time.monotonic()
        standby = warm_launcher().standby
        if standby is not None:
            # On a loaded 2-core box the factory's imports take minutes, past FORK_WAIT_S.
            standby.forked(timeout)
        timeout -= time.monotonic() - started
    return launch(run_dir, nproc=nproc, timeout=timeout, cuda_devices=cuda_devices)

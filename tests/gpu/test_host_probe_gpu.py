"""The worker's probe of its host on a real GPU (worker/executors/local/host_probe.py): a short process of its
own answers with what one tiny eager CUDA operation costs this host, which the heartbeat reports and the
forecast scales an eager step's host side by. Its size is the host's and is not judged here: bench.forecast
prints it beside each row (bench/RESULTS.md).

Skipped without CUDA; run on the device machine:
    python3 -m pytest -q tests/gpu/test_host_probe_gpu.py
"""

from __future__ import annotations

import logging

import pytest
import torch

from worker.executors.local.host_probe import probe_host_op_s
from worker.gpus import nvml_gpus

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_the_worker_probes_its_least_used_gpu_in_a_process_of_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    op_s = probe_host_op_s(nvml_gpus())
    assert op_s is not None and op_s > 0, caplog.text
    print(f"this host: {op_s * 1e6:.2f} us an eager operation")
    assert "us on an eager CUDA operation" in caplog.text

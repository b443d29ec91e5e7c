"""Every GPU's health from the real NVML (worker/gpu_faults.py): the counters, throttle reasons and Xid events
of each GPU the machine lends, all read and all sound, and `GET /v1/gpus` saying so.

Skipped without CUDA; run on the device machine:
    python3 -m pytest -q tests/gpu/test_gpu_health_gpu.py
"""

from __future__ import annotations

import pytest
import torch

from core.gpu_health import Faults
from worker.gpu_faults import CRITICAL_READS, _answered, _slowdowns
from worker.gpus import _nvml, gpu_faults, nvml_gpus

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_every_gpu_is_read_and_sound() -> None:
    indices = [gpu.index for gpu in nvml_gpus()]
    assert len(indices) >= torch.cuda.device_count() > 0
    with _nvml("each read") as pynvml:
        for index in indices:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            # Each query answers, or says this GPU does not support it: none fails.
            said = {read.__name__: _answered(pynvml, read, handle) for read in (*CRITICAL_READS, _slowdowns)}
            print(f"GPU {index} ({pynvml.nvmlDeviceGetName(handle)}): {said}")
    assert gpu_faults(indices) == {index: Faults() for index in indices}
    assert gpu_faults(indices) == {index: Faults() for index in indices}, "a second beat, Xids drained"

"""Per-job GPU telemetry from a real NVML, through the real service (issue 19 #4): rows of the job's GPU,
Prometheus gauges while it runs, and its owner's fair-share use once it ran.

Skipped without CUDA; run on the device machine (see bench/README.md for the command).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.gpu.test_gpu_e2e import gpu_spec
from tests.integration.jobs import metric_values, submit, wait_status
from tests.integration.servers import Stack

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir: Path = tmp_path_factory.mktemp("telemetry-stack")
    # A sample every beat, so a job of a few seconds has several.
    running = Stack.embedded(workdir, CUDA_VISIBLE_DEVICES="0", TRAINYARD_TELEMETRY_EVERY_BEATS="1")
    yield running
    running.stop()


def test_a_jobs_gpu_telemetry_is_recorded_and_exported(stack: Stack) -> None:
    with stack.client() as client:
        job = submit(client, gpu_spec([0], max_steps=1500))
        gauge = f'trainyard_job_gpu_utilization_percent{{gpu="0",job="{job["id"]}"}}'
        deadline = time.monotonic() + 300
        exported = False
        while not exported and time.monotonic() < deadline:
            exported = gauge in client.get("/metrics").text
            status = client.get(f"/v1/jobs/{job['id']}").json()["status"]
            if status in ("succeeded", "failed"):
                break
            time.sleep(0.5)
        assert exported, "no GPU gauge while the job ran"
        done = wait_status(client, job["id"], {"succeeded", "failed"}, timeout=600)
        assert done["status"] == "succeeded", done
        utilisation = [value for _, value in metric_values(client, job["id"], "gpu_util/0")]
        memory = [value for _, value in metric_values(client, job["id"], "gpu_mem_mb/0")]
        power = [value for _, value in metric_values(client, job["id"], "gpu_power_w/0")]
        assert utilisation and all(0 <= value <= 100 for value in utilisation), utilisation
        assert max(utilisation) > 0 and max(memory) > 0 and max(power) > 0
        assert metric_values(client, job["id"], "gpu_util/1") == []  # not its GPU
        print(f"gpu_util/0 samples: {utilisation}")
        usage = client.get("/v1/usage").json()["data"]
        assert [entry["user"] for entry in usage] == ["local"] and usage[0]["gpu_hours"] > 0

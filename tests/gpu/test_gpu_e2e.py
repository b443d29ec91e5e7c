"""The service on a GPU box: a 2-GPU DDP bf16 job, and a 1-GPU job pinned to physical GPU 1.

Skipped without CUDA; run on the device machine (see bench/README.md for the command).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from tests.integration.jobs import job_processes, metric_values, submit, wait_status
from tests.integration.servers import Stack

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")


def gpu_spec(gpus: list[int], max_steps: int) -> dict[str, Any]:
    return {
        "name": f"resnet18-gpus-{gpus}",
        "model": {"arch": "resnet18"},
        "data": {"dataset": "synthetic", "num_samples": 8192, "image_size": 64},
        "train": {"max_steps": max_steps, "batch_size": 256, "lr": 0.1, "seed": 0},
        "parallel": {"strategy": "auto", "gpus": gpus},
        "precision": "bf16",
        "performance": {"channels_last": True},
        "checkpoint": {"every_n_epochs": 0, "every_n_steps": 100},
        "metrics": {"every_n_steps": 10},
    }


@pytest.fixture(scope="module")
def gpu_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("gpu-stack")
    visible = ",".join(str(i) for i in range(torch.cuda.device_count()))
    stack = Stack.embedded(workdir, CUDA_VISIBLE_DEVICES=visible)
    yield stack
    stack.stop()


def memory_used_mb() -> list[float]:
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        return [pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20 for h in handles]
    finally:
        pynvml.nvmlShutdown()


def test_gpus_are_listed(gpu_stack: Stack) -> None:
    with gpu_stack.client() as client:
        hosts = client.get("/v1/gpus").json()["data"]
        gpus = [gpu for host in hosts for gpu in host["gpus"]]
        assert [gpu["index"] for gpu in gpus] == list(range(torch.cuda.device_count()))
        assert all(gpu["memory_total_mb"] > 0 for gpu in gpus)


@two_gpus
def test_ddp_bf16_on_two_gpus(gpu_stack: Stack) -> None:
    with gpu_stack.client() as client:
        job = submit(client, gpu_spec([0, 1], max_steps=200))
        assert job["plan"]["strategy"] == "ddp" and job["plan"]["backend"] == "nccl"
        job = wait_status(client, job["id"], {"succeeded"}, timeout=300)
        assert job["gpu_ids"] == [0, 1]
        loss = metric_values(client, job["id"], "loss")
        assert loss[-1][1] < loss[0][1], loss
        assert max(value for _, value in metric_values(client, job["id"], "peak_mem_mb")) > 100
        print("ddp bf16 2 GPUs:", job["latest_metrics"])


@two_gpus
def test_one_gpu_job_runs_on_physical_gpu_1(gpu_stack: Stack) -> None:
    idle = memory_used_mb()
    with gpu_stack.client() as client:
        job = submit(client, gpu_spec([1], max_steps=100000))
        wait_status(client, job["id"], {"running"}, timeout=180)
        time.sleep(5)
        busy = memory_used_mb()
        holders = {
            gpu["index"]: gpu["job_id"]
            for host in client.get("/v1/gpus").json()["data"]
            for gpu in host["gpus"]
        }
        client.post(f"/v1/jobs/{job['id']}/cancel")
        wait_status(client, job["id"], {"cancelled"}, timeout=60)
        assert not job_processes(gpu_stack.workdir / "runs", job["id"])
    print(f"memory used MB idle={idle} while the GPU-1 job ran={busy}; holders={holders}")
    assert holders[1] == job["id"] and holders[0] is None
    assert busy[1] - idle[1] > 500, "the job did not allocate on physical GPU 1"
    assert abs(busy[0] - idle[0]) < 100, "the job touched GPU 0"


def test_a_gpu_job_reports_each_phase_of_its_start_up(gpu_stack: Stack) -> None:
    """Its first step synchronises the device once, so the first_step phase holds the step's kernels."""
    with gpu_stack.client() as client:
        job = wait_status(
            client, submit(client, gpu_spec([0], max_steps=20))["id"], {"succeeded"}, timeout=300
        )
    phases = job["timings"]["phases"]
    named = ["queued", "launch", "process_start", "imports", "data", "model", "setup", "first_step"]
    assert [phase["phase"] for phase in phases] == named
    assert all(phase["seconds"] >= 0 for phase in phases), phases
    print("start-up on 1 GPU:", phases, "to first step", job["timings"]["to_first_step_s"])

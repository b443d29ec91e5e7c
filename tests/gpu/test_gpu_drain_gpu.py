"""A drain through the whole service on 2 real GPUs (uvicorn, a Celery worker, the real queue, NVML's
inventory): the job on the drained GPU stops at a checkpoint and resumes on the other, a job pinned to the
drained GPU waits saying why, and starts once it is undrained; the health shows in GET /v1/gpus and the CLI.

Skipped with fewer than 2 GPUs; run on the device machine (nvidia-h200-x2):
    python3 -m pytest -q -s tests/gpu/test_gpu_drain_gpu.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.gpu.test_gpu_e2e import gpu_spec
from tests.gpu.test_preemption_gpu import wait_until
from tests.integration.jobs import job_processes, submit, wait_status
from tests.integration.servers import Stack
from tests.integration.test_cli_e2e import trainyard
from tests.integration.test_faults_restart import wait_step

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")


@pytest.fixture(scope="module")
def gpu_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack.embedded(tmp_path_factory.mktemp("drain-stack"), CUDA_VISIBLE_DEVICES="0,1")
    yield stack
    stack.stop()


def health(stack: Stack) -> dict[int, tuple[str, str | None]]:
    with stack.client() as client:
        (host,) = client.get("/v1/gpus").json()["data"]
    return {gpu["index"]: (gpu["health"], gpu["health_reason"]) for gpu in host["gpus"]}


def test_a_drained_gpus_job_resumes_on_the_other_and_a_pinned_job_waits_for_the_undrain(
    gpu_stack: Stack,
) -> None:
    assert health(gpu_stack) == {0: ("ok", None), 1: ("ok", None)}, "NVML judged an H200 unsound"
    spec = gpu_spec([0], max_steps=100_000)
    spec["parallel"] = {"num_gpus": 1}
    spec["checkpoint"] = {"every_n_epochs": 0, "every_n_steps": 50}
    with gpu_stack.client() as client:
        job_id = submit(client, spec)["id"]
        wait_step(gpu_stack, job_id, 60, timeout=300)
        (gpu,) = client.get(f"/v1/jobs/{job_id}").json()["gpu_ids"]
        host = client.get("/v1/gpus").json()["data"][0]["host"]
        drained = trainyard(gpu_stack, "gpus", "drain", host, gpu, "--reason", "fans failing")
        assert drained.returncode == 0, drained.stderr
        assert f"job {job_id} asked to stop at its next checkpoint" in drained.stdout
        moved = wait_until(client, job_id, lambda job: job["attempt"] >= 2 and job["status"] == "running")
        events = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
        pinned = submit(client, {**gpu_spec([gpu], max_steps=20), "name": "pinned"})["id"]
        waiting = wait_until(client, pinned, lambda job: "drained" in (job["message"] or ""))
        listed = trainyard(gpu_stack, "gpus", "--wide")
        undrained = trainyard(gpu_stack, "gpus", "undrain", host, gpu)
        assert undrained.returncode == 0, undrained.stderr
        wait_status(client, pinned, {"succeeded"}, timeout=300)
        client.post(f"/v1/jobs/{job_id}/cancel")
        ended = wait_status(client, job_id, {"cancelled"}, timeout=120)
    print("moved:", moved["attempt"], moved["gpu_ids"], [(e["to_status"], e["reason"]) for e in events])
    print(listed.stdout)
    assert moved["attempt"] == 2 and moved["gpu_ids"] == [1 - gpu]
    assert [e["reason"] for e in events if e["to_status"] in ("preempting", "queued")][-2:] == [
        "gpu_drained",
        "gpu_drained",
    ]
    assert f"GPU {gpu}, drained (fans failing" in waiting["message"], waiting["message"]
    assert "drained" in listed.stdout and "fans failing" in listed.stdout
    assert health(gpu_stack) == {0: ("ok", None), 1: ("ok", None)}
    assert ended["status"] == "cancelled" and not job_processes(gpu_stack.workdir / "runs", job_id)

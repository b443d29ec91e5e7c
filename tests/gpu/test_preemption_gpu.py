"""Preemption on one real GPU, through the service: a long priority-0 job is stopped for a priority-10 job
at its next report step after a final checkpoint, requeued, and resumed; its loss curve matches an
uninterrupted same-seed run with no duplicate or missing step. Prints the waiting job's time from submit to
its first step and the victim's lost work.

Skipped without CUDA; run on the device machine (see bench/README.md for the command).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch

from tests.integration.jobs import metric_values, statuses, submit, wait_status
from tests.integration.servers import Stack

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

REPORT_EVERY = 10
# fp32 on one GPU repeats a same-seed run up to the order of cuBLAS's sums.
LOSS_RTOL = 1e-3


def spec(name: str, max_steps: int) -> dict[str, Any]:
    return {
        "name": name,
        "model": {"arch": "mlp", "kwargs": {"hidden": 1024, "depth": 4}},
        "data": {"dataset": "synthetic", "num_samples": 65536},
        "train": {"max_steps": max_steps, "batch_size": 256, "lr": 0.01, "seed": 0},
        "parallel": {"num_gpus": 1},
        "checkpoint": {"every_n_epochs": 0, "every_n_steps": 200},
        "metrics": {"every_n_steps": REPORT_EVERY},
    }


@pytest.fixture(scope="module")
def gpu_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack.embedded(
        tmp_path_factory.mktemp("gpu-preempt"),
        CUDA_VISIBLE_DEVICES="0",
        TRAINYARD_PREEMPT_MIN_RUNTIME_S="0",
        TRAINYARD_PREEMPT_GRACE_S="60",
    )
    yield stack
    stack.stop()


def wait_until(client: httpx.Client, job_id: int, done: Any, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if done(job):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never got there")


def test_a_preempted_job_resumes_like_an_uninterrupted_run(gpu_stack: Stack) -> None:
    with gpu_stack.client() as client:
        victim = submit(client, spec("victim", 3000))["id"]
        wait_until(client, victim, lambda job: job["progress"]["step"] >= 500)
        submitted = time.monotonic()
        urgent = submit(client, {**spec("urgent", 200), "priority": 10})["id"]
        stopped = wait_until(client, victim, lambda job: job["status"] == "queued")
        newest = max(c["step"] for c in client.get(f"/v1/jobs/{victim}/checkpoints").json()["data"])
        wait_until(client, urgent, lambda job: job["progress"]["step"] > 0)
        first_step_s = time.monotonic() - submitted
        wait_status(client, urgent, {"succeeded"}, timeout=300)
        resumed = wait_status(client, victim, {"succeeded"}, timeout=600)
        reference = wait_status(client, submit(client, spec("reference", 3000))["id"], {"succeeded"}, 600)

        events = client.get(f"/v1/jobs/{victim}/events").json()["data"]
        preempted = next(e for e in events if e["to_status"] == "preempting")
        assert f"preempted by job {urgent}" in preempted["message"]
        assert statuses(client, victim).count("queued") == 2 and resumed["attempt"] == 2
        lost = stopped["progress"]["step"] - newest
        assert 0 <= lost <= REPORT_EVERY, (stopped["progress"], newest)

        curve, expected = (
            metric_values(client, victim, "loss"),
            metric_values(client, reference["id"], "loss"),
        )
        steps = [step for step, _ in curve]
        assert steps == sorted(set(steps)) == [step for step, _ in expected], "duplicate or missing steps"
        for (step, value), (_, want) in zip(curve, expected, strict=True):
            assert value == pytest.approx(want, rel=LOSS_RTOL), step
        print(f"preemption, one GPU: submit to first step {first_step_s:.1f} s, victim lost {lost} steps")

"""A 2-rank gloo DDP job through the real service, on the embedded default and on Redis + PostgreSQL."""

from __future__ import annotations

import io

import torch

from tests.integration.jobs import example_spec, metric_values, statuses, submit, wait_status
from tests.integration.servers import Stack

SPEC = example_spec("digits_ddp_cpu.json", train={"epochs": 3}, checkpoint={"keep_last": 2})


def test_dry_run_returns_the_plan_and_stores_nothing(stack: Stack) -> None:
    # Counted in SQL, not on the API's first page: the stack is shared, so that page may already be full.
    before = stack.sql("SELECT count(*) FROM jobs")
    with stack.client() as client:
        response = client.post("/v1/jobs", params={"dry_run": "true"}, json=SPEC)
        assert response.status_code == 200, response.text
        plan = response.json()["plan"]
        assert plan["world_size"] == 2 and plan["per_rank_batch"] == 32 and plan["backend"] == "gloo"
        assert plan["argv"][plan["argv"].index("--nproc-per-node") + 1] == "2"
    assert stack.sql("SELECT count(*) FROM jobs") == before


def test_bad_spec_is_refused_naming_the_field(stack: Stack) -> None:
    before = stack.sql("SELECT count(*) FROM jobs")
    with stack.client() as client:
        response = client.post("/v1/jobs", json={**SPEC, "parallel": {"strategy": "ddp", "gpus": [1]}})
        assert response.status_code == 422
        assert "parallel.gpus" in response.text
    assert stack.sql("SELECT count(*) FROM jobs") == before


def test_ddp_job_trains_and_reports(stack: Stack) -> None:
    with stack.client() as client:
        job = submit(client, SPEC)
        assert job["status"] == "queued"
        job = wait_status(client, job["id"], {"succeeded"})

        assert statuses(client, job["id"]) == ["queued", "starting", "running", "succeeded"]
        assert job["progress"]["step"] == job["progress"]["total"] > 0
        assert "loss" in job["latest_metrics"]

        loss = metric_values(client, job["id"], "loss")
        steps = [step for step, _ in loss]
        assert steps == sorted(set(steps)) and steps[-1] == job["progress"]["total"]
        assert loss[-1][1] < 0.5 * loss[0][1], loss
        accuracy = metric_values(client, job["id"], "eval_accuracy")
        assert len(accuracy) == 3 and accuracy[-1][1] > 0.85, accuracy
        for name in ("lr", "samples_per_s", "peak_mem_mb"):
            assert metric_values(client, job["id"], name), name
        page = client.get(
            f"/v1/jobs/{job['id']}/metrics", params={"name": "loss", "after_step": 5, "limit": 2}
        )
        assert [row["step"] for row in page.json()["data"]] == steps[1:3]

        checkpoints = client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["data"]
        assert len(checkpoints) == 2, checkpoints
        blob = client.get(f"/v1/checkpoints/{checkpoints[-1]['id']}/download")
        assert blob.status_code == 200
        state = torch.load(io.BytesIO(blob.content), weights_only=True)
        assert state["step"] == job["progress"]["total"]
        assert not any(key.startswith("module.") for key in state["model"])

        listed = client.get("/v1/jobs", params={"status": "succeeded"}).json()["data"]
        assert job["id"] in [item["id"] for item in listed]

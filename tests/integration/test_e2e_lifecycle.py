"""Resume, cancel and side-by-side jobs through the real service (embedded default)."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobs import example_spec, job_processes, metric_values, statuses, submit, wait_status
from tests.integration.servers import Stack

QUICK = example_spec("digits_ddp_cpu.json", train={"epochs": 2})
# Long enough to be caught mid-run: synthetic data and thousands of steps.
LONG = example_spec(
    "digits_ddp_cpu.json",
    data={"dataset": "synthetic", "num_samples": 4096, "image_size": 8, "val_fraction": 0.1},
    train={"epochs": None, "max_steps": 100000},
    checkpoint={"every_n_epochs": 0, "save_final": False},
)


def runs_dir(stack: Stack) -> Path:
    return Path(stack.env["TRAINYARD_RUNS_DIR"])


@pytest.fixture(scope="module")
def side_by_side(embedded_stack: Stack) -> list[dict[str, Any]]:
    """Two QUICK jobs submitted together, run to the end: the overlap test looks at when they ran, and the
    resume test resumes from one of them (a job of its own would cost another torchrun start)."""
    with embedded_stack.client() as client:
        ids = [submit(client, QUICK)["id"] for _ in range(2)]
        return [wait_status(client, job_id, {"succeeded"}) for job_id in ids]


def test_resume_continues_at_the_next_step(embedded_stack: Stack, side_by_side: list[dict[str, Any]]) -> None:
    first = side_by_side[0]
    with embedded_stack.client() as client:
        checkpoints = client.get(f"/v1/jobs/{first['id']}/checkpoints").json()["data"]
        middle = min(checkpoints, key=lambda c: c["step"])
        resumed = submit(
            client,
            {**QUICK, "train": {**QUICK["train"], "epochs": 3}, "checkpoint": {"resume_from": middle["id"]}},
        )
        assert resumed["plan"]["resume_path"]
        resumed = wait_status(client, resumed["id"], {"succeeded"})
        steps = [step for step, _ in metric_values(client, resumed["id"], "loss")]
        assert steps[0] > middle["step"], (middle["step"], steps)
        assert steps[0] - middle["step"] <= QUICK["metrics"]["every_n_steps"]
        assert (
            resumed["progress"]["step"] == resumed["progress"]["total"] == first["progress"]["total"] * 3 // 2
        )


def test_cancel_running_job_leaves_no_process(embedded_stack: Stack) -> None:
    with embedded_stack.client() as client:
        job = submit(client, LONG)
        wait_status(client, job["id"], {"running"}, timeout=120)
        assert job_processes(runs_dir(embedded_stack), job["id"]), "the job should have live processes"
        response = client.post(f"/v1/jobs/{job['id']}/cancel")
        assert response.status_code in (200, 202), response.text
        cancelled_at = time.monotonic()
        wait_status(client, job["id"], {"cancelled"}, timeout=30)
        while job_processes(runs_dir(embedded_stack), job["id"]):
            assert time.monotonic() - cancelled_at < 30, "processes of the job outlived the cancel"
            time.sleep(0.2)
        assert statuses(client, job["id"])[-2:] == ["cancelling", "cancelled"]


def test_cancel_during_dispatch_never_trains(embedded_stack: Stack) -> None:
    with embedded_stack.client() as client:
        job = submit(client, QUICK)
        assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code in (200, 202)
        job = wait_status(client, job["id"], {"cancelled"}, timeout=60)
        assert "running" not in statuses(client, job["id"])
        assert metric_values(client, job["id"], "loss") == []
        time.sleep(3)  # a late doorbell must not revive it
        assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "cancelled"
        assert not job_processes(runs_dir(embedded_stack), job["id"])


def test_two_jobs_run_side_by_side(side_by_side: list[dict[str, Any]]) -> None:
    start = [datetime.fromisoformat(job["started_at"]) for job in side_by_side]
    end = [datetime.fromisoformat(job["finished_at"]) for job in side_by_side]
    assert start[0] < end[1] and start[1] < end[0], "the two jobs did not overlap"


def test_a_finished_job_shows_each_phase_of_its_start_up(
    embedded_stack: Stack, side_by_side: list[dict[str, Any]]
) -> None:
    phases = side_by_side[0]["timings"]["phases"]
    named = ["queued", "launch", "process_start", "imports", "data", "model", "setup", "first_step"]
    assert [phase["phase"] for phase in phases] == named
    assert all(phase["seconds"] >= 0 for phase in phases), phases
    with embedded_stack.client() as client:
        scraped = client.get("/metrics").text
    assert 'trainyard_job_startup_seconds_count{phase="to_first_step"}' in scraped

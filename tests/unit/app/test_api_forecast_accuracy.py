"""Closing issue 44's loop: a job's forecast shows what the job measured once its trainer reported it, and
GET /v1/forecast/accuracy compares the two over the caller's recent finished jobs. The forecasts are stored
on the job rows as the forecaster would have made them (its own tests are test_api_forecast.py); what is
tested here is how they are read back beside the measured figures."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings
from core.db import session_scope
from core.keys import create_key
from core.models import Job, Worker
from core.states import JobStatus
from jobspec.forecast import Forecast
from tests.unit.conftest import assert_problem, job_body, submit

MiB, GiB = 2**20, 2**30


def forecast(peak_gib: float = 10.0, step_s: float = 0.2) -> dict[str, Any]:
    made = Forecast(
        peak_memory_bytes=int(peak_gib * GiB),
        device_memory_bytes=140 * GiB,
        step_time_s=step_s,
        job_time_s=step_s * 100,
        fits=True,
        basis="fitted on an H200 (bench.forecast, 13 configurations)",
        breakdown={"model_kind": "transformer"},
    )
    return made.model_dump(mode="json")


def ran(job_id: int, metrics: dict[str, float], status: JobStatus = JobStatus.SUCCEEDED, **plan: Any) -> None:
    """The job as a worker leaves it: its state, its GPU, its trainer's latest metrics; `plan` is merged
    into its stored plan (a forecast, the device)."""
    with session_scope() as session:
        job = session.get_one(Job, job_id)
        job.plan = {**job.plan, **plan}
        job.status, job.latest_metrics = status, metrics
        if job.plan.get("device") == "cuda":
            job.host, job.gpu_ids = "box", [1]


def test_a_gpu_jobs_forecast_shows_what_it_reserved_and_its_step_time(client: TestClient) -> None:
    job_id = submit(client)["id"]
    ran(job_id, {}, JobStatus.RUNNING, forecast=forecast(), device="cuda")
    shown = client.get(f"/v1/jobs/{job_id}").json()["plan"]["forecast"]
    assert shown["measured_peak_memory_bytes"] is None and shown["measured_step_time_s"] is None

    # The peak the allocator reserved is what a forecast predicts; the peak allocated is lower.
    ran(
        job_id,
        {"peak_reserved_mb": 10_500.0, "peak_mem_mb": 9_000.0, "step_time_s": 0.25},
        forecast=forecast(),
    )
    shown = client.get(f"/v1/jobs/{job_id}").json()["plan"]["forecast"]
    assert shown["measured_peak_memory_bytes"] == 10_500 * MiB
    assert shown["measured_step_time_s"] == 0.25
    assert shown["peak_memory_bytes"] == 10 * GiB, "the forecast itself is as stored"
    listed = client.get("/v1/jobs").json()["data"][0]["plan"]["forecast"]
    assert listed["measured_peak_memory_bytes"] == 10_500 * MiB


def test_a_cpu_job_shows_its_resident_peak_and_a_gpu_job_without_reserved_its_allocated(
    client: TestClient,
) -> None:
    cpu, gpu = submit(client)["id"], submit(client)["id"]
    ran(cpu, {"peak_mem_mb": 300.0, "peak_reserved_mb": 999.0, "step_time_s": 0.01}, forecast=forecast(0.25))
    ran(gpu, {"peak_mem_mb": 9_000.0, "step_time_s": 0.2}, forecast=forecast(), device="cuda")
    assert client.get(f"/v1/jobs/{cpu}").json()["plan"]["forecast"]["measured_peak_memory_bytes"] == 300 * MiB
    assert (
        client.get(f"/v1/jobs/{gpu}").json()["plan"]["forecast"]["measured_peak_memory_bytes"] == 9_000 * MiB
    )


def test_a_job_without_a_forecast_gets_no_measured_figures(client: TestClient) -> None:
    job_id = submit(client)["id"]
    ran(job_id, {"peak_mem_mb": 300.0, "step_time_s": 0.01}, forecast_note="no step to trace")
    plan = client.get(f"/v1/jobs/{job_id}").json()["plan"]
    assert plan["forecast"] is None and plan["forecast_note"] == "no step to trace"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_accuracy_compares_each_users_own_finished_jobs_and_an_admin_sees_all(
    auth_on: Settings, session: Session
) -> None:
    alice, bob, admin = (create_key(session, user, admin=user == "root") for user in ("alice", "bob", "root"))
    session.add(
        Worker(id="box:1", host="box", gpus=[{"index": 1, "name": "NVIDIA H200", "memory_total_mb": 143_771}])
    )
    session.commit()
    client = TestClient(create_app())

    def job(token: str, name: str) -> int:
        answer = client.post("/v1/jobs", json=job_body(name=name), headers=bearer(token))
        assert answer.status_code == 201, answer.text
        job_id: int = answer.json()["job"]["id"]
        return job_id

    high = job(alice, "high")  # forecast 10 GiB, 0.2 s; measured 8 GiB (1.25x), 0.2 s
    ran(high, {"peak_reserved_mb": 8 * 1024, "step_time_s": 0.2}, forecast=forecast(), device="cuda")
    close = job(alice, "close")  # forecast 1 GiB, 0.1 s; measured 1 GiB, 0.125 s (0.8x)
    ran(close, {"peak_mem_mb": 1024, "step_time_s": 0.125}, JobStatus.FAILED, forecast=forecast(1, 0.1))
    running = job(alice, "running")
    ran(running, {"peak_mem_mb": 1024, "step_time_s": 0.1}, JobStatus.RUNNING, forecast=forecast())
    unforecast = job(alice, "program")
    ran(unforecast, {"peak_mem_mb": 1024, "step_time_s": 0.1}, forecast_note="no step to trace")
    unmeasured = job(alice, "no-metrics")
    ran(unmeasured, {}, JobStatus.CANCELLED, forecast=forecast())
    bobs = job(bob, "bobs")
    ran(bobs, {"peak_mem_mb": 2048, "step_time_s": 0.2}, JobStatus.TIMED_OUT, forecast=forecast(2))

    answer = client.get("/v1/forecast/accuracy", headers=bearer(alice))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [row["name"] for row in body["data"]] == ["close", "high"], "newest first, finished and measured"
    close_row, high_row = body["data"]
    assert high_row == {
        "job_id": high,
        "name": "high",
        "model_kind": "transformer",
        "gpu": "NVIDIA H200",
        "forecast_peak_memory_bytes": 10 * GiB,
        "measured_peak_memory_bytes": 8 * GiB,
        "peak_ratio": 1.25,
        "forecast_step_time_s": 0.2,
        "measured_step_time_s": 0.2,
        "step_ratio": 1.0,
    }
    assert (close_row["gpu"], close_row["peak_ratio"], close_row["step_ratio"]) == (None, 1.0, 0.8)
    assert body["summary"] == {
        "jobs": 2,
        "peak_ratio_median": 1.125,
        "step_ratio_median": 0.9,
        "within_10pct_peak": 1,
        "within_20pct_step": 2,
    }

    assert [
        row["name"] for row in client.get("/v1/forecast/accuracy", headers=bearer(bob)).json()["data"]
    ] == ["bobs"]
    everyone = client.get("/v1/forecast/accuracy", params={"limit": 2}, headers=bearer(admin)).json()
    assert [row["name"] for row in everyone["data"]] == ["bobs", "close"] and everyone["summary"]["jobs"] == 2
    assert client.get("/v1/forecast/accuracy").status_code == 401


@pytest.mark.parametrize("limit", ["0", "501", "07"])
def test_accuracy_refuses_a_limit_out_of_range_naming_it(client: TestClient, limit: str) -> None:
    assert_problem(client.get("/v1/forecast/accuracy", params={"limit": limit}), "limit", "limit")


def test_accuracy_of_no_jobs_is_an_empty_list(client: TestClient) -> None:
    body = client.get("/v1/forecast/accuracy").json()
    assert body == {
        "data": [],
        "summary": {
            "jobs": 0,
            "peak_ratio_median": None,
            "step_ratio_median": None,
            "within_10pct_peak": 0,
            "within_20pct_step": 0,
        },
    }


def test_accuracy_looks_back_over_ten_times_limit_finished_jobs_at_most(client: TestClient) -> None:
    """However many of a user's newest jobs have no forecast (programs, forecasting off), one request reads
    a bounded number of rows: an older forecast job beyond them is not looked for."""
    older = submit(client)["id"]
    ran(older, {"peak_mem_mb": 1024, "step_time_s": 0.1}, forecast=forecast(1.0, 0.1))
    for _ in range(10):
        ran(submit(client)["id"], {"peak_mem_mb": 1024, "step_time_s": 0.1}, forecast_note="no step to trace")
    assert client.get("/v1/forecast/accuracy", params={"limit": 1}).json()["data"] == []
    assert [row["job_id"] for row in client.get("/v1/forecast/accuracy").json()["data"]] == [older]

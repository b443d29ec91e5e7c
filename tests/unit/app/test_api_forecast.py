"""Every plan's forecast (issue 44), through the API as a user meets it: in the dry run, on the stored job, a
refusal with the changes that would fit, and `auto` choosing fsdp where ddp would not fit. The forecaster is
the real one (python -m trainers.forecast, tracing under fake tensors); the GPUs are those a worker reported,
with a memory chosen from the forecasts themselves so that the test does not depend on the calibration."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete
from sqlalchemy.orm import Session

from app.services.forecasts import FORECASTER
from core.config import Settings, get_settings
from core.models import Worker, utcnow
from tests.unit.app.test_api_code import GZIP
from tests.unit.app.test_api_program import FILES, program_body
from tests.unit.code_archives import bundle_archive
from tests.unit.conftest import assert_problem, job_body, submit


@pytest.fixture(autouse=True)
def forecasting(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TRAINYARD_FORECAST", "on")
    # What the forecast says is checked here, not its deadline: on two cores shared with the rest of
    # `make test`, a trace took longer than the 30 s a submission waits for it by default.
    monkeypatch.setenv("TRAINYARD_FORECAST_TIMEOUT_S", "600")
    get_settings.cache_clear()
    FORECASTER.start()
    assert FORECASTER.wait_ready(300), "the forecaster process did not start"
    yield
    get_settings.cache_clear()


GPT = {"arch": "gpt", "kwargs": {"n_layer": 4, "n_head": 4, "n_embd": 256}}
TOKENS = {"dataset": "synthetic_tokens", "block_size": 128, "vocab_size": 8192, "num_samples": 512}


def report_gpus(session: Session, memory_mb: int, count: int = 1) -> None:
    """One worker whose GPUs have `memory_mb` each (an H200 by name: its calibration is measured)."""
    session.execute(delete(Worker))
    gpus = [{"index": i, "name": "NVIDIA H200", "memory_total_mb": memory_mb} for i in range(count)]
    session.add(Worker(id="box:1", host="box", gpus=gpus, cpus=16))
    session.commit()


def dry_run(client: TestClient, **sections: Any) -> dict[str, Any]:
    response = client.post("/v1/jobs?dry_run=true", json=job_body(**sections))
    assert response.status_code == 200, response.text
    plan: dict[str, Any] = response.json()["plan"]
    return plan


def gpu_job(batch: int, strategy: str = "single", gpus: int = 1, precision: str = "fp32") -> dict[str, Any]:
    return {
        "model": GPT,
        "data": TOKENS,
        "train": {"max_steps": 10, "batch_size": batch, "optimizer": "adamw"},
        "parallel": {"strategy": strategy, "num_gpus": gpus},
        "precision": precision,
    }


def test_a_cpu_job_is_forecast_in_its_dry_run_and_on_its_record(client: TestClient) -> None:
    plan = dry_run(client)
    forecast = plan["forecast"]
    assert forecast["peak_memory_bytes"] > 0 and forecast["step_time_s"] > 0
    assert forecast["fits"] is True and forecast["job_time_s"] == forecast["step_time_s"] * 5
    assert forecast["breakdown"]["parameters"] > 0 and "CPU" in forecast["basis"]
    job = submit(client)
    assert client.get(f"/v1/jobs/{job['id']}").json()["plan"]["forecast"]["peak_memory_bytes"] > 0


def test_a_job_that_will_not_fit_its_gpu_is_refused_with_what_would_fit(
    client: TestClient, session: Session
) -> None:
    report_gpus(session, 1_000_000)
    fits = dry_run(client, **gpu_job(batch=64))["forecast"]
    assert fits["fits"] is True and fits["device_memory_bytes"] == 1_000_000 * 2**20
    # A GPU 10 % smaller than the job's peak: bf16, activation checkpointing or smaller micro-batches fit.
    report_gpus(session, int(fits["peak_memory_bytes"] * 0.9 / 2**20))

    planned = dry_run(client, **gpu_job(batch=64))
    assert planned["runnable"] is False and planned["forecast"]["fits"] is False
    assert any(reason.startswith("forecast: ") for reason in planned["not_runnable_because"])
    refused = client.post("/v1/jobs", json=job_body(**gpu_job(batch=64)))
    assert_problem(refused, "forecast", "it would fit with ")
    assert "GiB" in refused.json()["detail"]


def test_a_cpu_job_that_will_not_fit_the_smallest_live_workers_memory_is_refused_with_what_would_fit(
    client: TestClient, session: Session
) -> None:
    cpu_job = {
        "model": GPT,
        "data": {**TOKENS, "block_size": 256},
        "train": {"max_steps": 5, "batch_size": 64},
    }
    session.add(Worker(id="big:1", host="big", gpus=[], cpus=16, memory_mb=1_000_000))
    session.commit()
    fits = dry_run(client, **cpu_job)["forecast"]
    assert fits["fits"] is True and fits["device_memory_bytes"] == 1_000_000 * 2**20
    # A live worker 10 % smaller than the job's peak, beside the big one; a smaller one, long gone, is not
    # where the job may land.
    small_mb = int(fits["peak_memory_bytes"] * 0.9 / 2**20)
    gone = utcnow() - timedelta(days=1)
    session.add(Worker(id="small:1", host="small", gpus=[], cpus=16, memory_mb=small_mb))
    session.add(Worker(id="gone:1", host="gone", gpus=[], cpus=16, memory_mb=1, heartbeat_at=gone))
    session.commit()

    refused = client.post("/v1/jobs", json=job_body(**cpu_job))
    assert_problem(refused, "forecast", "it would fit with train.grad_accum_steps")
    assert f"{small_mb * 2**20 / 2**30:.1f} GiB" in refused.json()["detail"]


def test_auto_takes_fsdp_where_only_fsdp_fits(client: TestClient, session: Session) -> None:
    report_gpus(session, 1_000_000, count=2)
    big = {"arch": "gpt", "kwargs": {"n_layer": 8, "n_head": 8, "n_embd": 512}}
    small_batch = {"max_steps": 10, "batch_size": 2, "optimizer": "adamw"}
    shape = {"model": big, "data": {**TOKENS, "block_size": 64}, "train": small_batch, "precision": "fp32"}
    ddp = dry_run(client, **shape, parallel={"strategy": "ddp", "num_gpus": 2})["forecast"]
    fsdp = dry_run(client, **shape, parallel={"strategy": "fsdp", "num_gpus": 2})["forecast"]
    assert fsdp["peak_memory_bytes"] < ddp["peak_memory_bytes"]
    between = (fsdp["peak_memory_bytes"] * 1.1 + ddp["peak_memory_bytes"]) / 2
    report_gpus(session, int(between / 2**20), count=2)

    auto = dry_run(client, **shape, parallel={"strategy": "auto", "num_gpus": 2})
    assert auto["strategy"] == "fsdp" and auto["runnable"] is True
    assert auto["strategy_reason"].startswith("the forecast: ddp needs")


def test_a_program_has_no_forecast_and_says_why(client: TestClient) -> None:
    pushed = client.post("/v1/code", content=bundle_archive(FILES), headers=GZIP)
    response = client.post("/v1/jobs", json=program_body(pushed.json()["id"]), params={"dry_run": True})
    assert response.status_code == 200, response.text
    plan = response.json()["plan"]
    assert plan["forecast"] is None
    assert "no step to trace" in plan["forecast_note"]

"""The learned calibration through the API (issue 44): a dry run's forecast, made by the real forecaster
(python -m trainers.forecast) for an H200, names its key; once finished runs of that key measured a slower
step, the same spec's next forecast, though its shape is cached, takes their factor and says so."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.services import forecast_learning
from core.models import Job
from core.states import JobStatus
from tests.unit.app.test_api_forecast import dry_run, forecasting, gpu_job, report_gpus

__all__ = ["forecasting"]  # the forecaster process, started for every test of this module


def test_a_cached_shapes_next_forecast_takes_the_factor_learned_since(
    client: TestClient, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    report_gpus(session, 1_000_000)
    shape = gpu_job(batch=8, precision="bf16")
    first = dry_run(client, **shape)["forecast"]
    assert (first["breakdown"]["gpu_model"], first["breakdown"]["execution"]) == ("NVIDIA H200", "eager")
    assert "step time from the table: 0 measured runs of transformer, eager, on NVIDIA H200" in first["basis"]

    for _ in range(3):  # runs of this key on the box's H200 (GPU 0) that took 1.5 times the forecast
        session.add(
            Job(
                name="ran",
                spec={},
                plan={"device": "cuda", "forecast": first},
                status=JobStatus.SUCCEEDED,
                latest_metrics={"step_time_s": first["step_time_s"] * 1.5},
                host="box",
                gpu_ids=[0],
            )
        )
    session.commit()
    monkeypatch.setattr(forecast_learning, "FRESH_S", -1.0)  # read the runs now, not in 30 s
    learned = dry_run(client, **shape)["forecast"]
    assert learned["step_time_s"] == pytest.approx(first["step_time_s"] * 1.5)
    assert learned["job_time_s"] == pytest.approx(learned["step_time_s"] * 10)
    assert "step time x 1.50, learned from 3 runs of transformer, eager, on NVIDIA H200" in learned["basis"]

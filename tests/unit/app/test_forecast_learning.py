"""The step-time calibration learns from the service's own runs (issue 44, app/services/forecast_learning.py):
finished jobs stored as a worker leaves them, each with its forecast and its trainer's measured step time,
scale the next forecast of their key (GPU model, kind of model, compiled or eager) once there are enough of
them, and its basis says how many runs it rests on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session

from app.services import forecast_learning
from app.services.forecast_learning import LEARN_FROM, Learned, calibrated
from core.models import Job, Worker
from core.states import JobStatus
from jobspec.forecast import CPU_DEVICE, Forecast, StepKey

H200, A100 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB"
TABLE_BASIS = "fitted on an H200 (bench.forecast)"


@pytest.fixture
def gpus(session: Session) -> Iterator[None]:
    """Two hosts: an H200 box and an A100 box, each GPU 0."""
    for host, name in (("h200-box", H200), ("a100-box", A100)):
        session.add(Worker(id=f"{host}:1", host=host, gpus=[{"index": 0, "name": name}], cpus=16))
    session.commit()
    yield


def forecast(step_s: float = 0.2, gpu: str = H200, kind: str = "transformer", **breakdown: Any) -> Forecast:
    """A GPU job's forecast as the forecaster makes it (trainers/forecast/estimate.py's breakdown keys)."""
    return Forecast(
        peak_memory_bytes=2**30,
        step_time_s=step_s,
        job_time_s=step_s * 100,
        fits=True,
        basis=TABLE_BASIS,
        breakdown={"model_kind": kind, "gpu_model": gpu, "execution": "compiled", **breakdown},
    )


def ran(
    session: Session,
    made: Forecast,
    measured_s: float,
    host: str = "h200-box",
    on_cpu: bool = False,
    **job: Any,
) -> None:
    """A finished job with `made` as its plan's forecast and its trainer's measured step time, on GPU 0 of
    `host` or on its CPU."""
    session.add(
        Job(
            name="run",
            spec={},
            plan={"device": "cpu" if on_cpu else "cuda", "forecast": made.model_dump(mode="json")},
            status=job.get("status", JobStatus.SUCCEEDED),
            latest_metrics={
                "step_time_s": measured_s,
                "peak_mem_mb" if on_cpu else "peak_reserved_mb": 1024.0,
            },
            host=host,
            gpu_ids=None if on_cpu else [0],
        )
    )
    session.commit()


def test_runs_of_the_key_scale_the_next_forecast_and_its_basis_names_their_count(
    session: Session, gpus: None
) -> None:
    for measured in (0.25, 0.3, 0.24, 0.26):  # ratios 1.25, 1.5, 1.2, 1.3: median 1.275
        ran(session, forecast(0.2), measured)
    ran(session, forecast(0.2), 0.3, status=JobStatus.RUNNING)  # not finished: not counted
    scaled = calibrated(session, forecast(0.4))
    assert scaled is not None
    assert scaled.step_time_s == pytest.approx(0.4 * 1.275)
    assert scaled.job_time_s == pytest.approx(0.4 * 1.275 * 100)
    assert scaled.basis == (
        f"{TABLE_BASIS}; step time x 1.27, learned from 4 runs of transformer, compiled, on {H200}"
    )
    assert scaled.breakdown["table_step_time_s"] == 0.4
    assert scaled.breakdown["learned_step_factor"] == pytest.approx(1.275)


def test_fewer_runs_than_the_minimum_leave_the_tables_figure(session: Session, gpus: None) -> None:
    for measured in (0.4, 0.4):
        ran(session, forecast(0.2), measured)
    kept = calibrated(session, forecast(0.4))
    assert kept is not None and kept.step_time_s == 0.4 and kept.job_time_s == 40.0
    assert kept.basis.endswith(
        "2 measured runs of transformer, compiled, on NVIDIA H200, 3 needed to learn from them"
    )


def test_other_gpu_models_other_kinds_and_runs_on_another_gpu_do_not_count(
    session: Session, gpus: None
) -> None:
    for _ in range(3):
        ran(session, forecast(0.2, gpu=A100), 0.4, host="a100-box")  # another GPU model's runs
        ran(session, forecast(0.2, kind="convolutional"), 0.4)  # another kind of model
        ran(session, forecast(0.2, execution="eager"), 0.4)  # eager, not compiled
        ran(session, forecast(0.2), 0.4, host="a100-box")  # forecast for an H200, ran on an A100
    kept = calibrated(session, forecast(0.2))
    assert kept is not None and kept.step_time_s == 0.2 and "0 measured runs" in kept.basis
    a100 = calibrated(session, forecast(0.2, gpu=A100))
    assert a100 is not None and a100.step_time_s == pytest.approx(0.4) and "3 runs" in a100.basis


def test_a_factor_learns_from_the_tables_figure_and_is_bounded(
    session: Session, gpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored forecast already scaled is compared by the table's figure it kept: a factor that learned
    from its own output would drift back to 1. Far-off runs move it at most to the bound."""
    for _ in range(3):
        ran(session, forecast(0.5, table_step_time_s=0.25, learned_step_factor=2.0), 0.5)
    scaled = calibrated(session, forecast(0.1))
    assert scaled is not None and scaled.step_time_s == pytest.approx(0.2)
    for _ in range(LEARN_FROM):
        ran(session, forecast(0.1), 1.0)  # ten times the table: clamped
    monkeypatch.setattr(forecast_learning, "FRESH_S", -1.0)  # read again now
    bounded = calibrated(session, forecast(0.1))
    assert bounded is not None and bounded.step_time_s == pytest.approx(0.2)
    assert f"learned from {LEARN_FROM} runs" in bounded.basis


def test_a_burst_of_forecasts_reads_the_factors_once_then_again_once_stale(
    session: Session, gpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Session] = []
    read = forecast_learning.read_factors

    def counted(session: Session) -> dict[StepKey, Learned]:
        reads.append(session)
        return read(session)

    monkeypatch.setattr(forecast_learning, "read_factors", counted)
    for _ in range(5):
        calibrated(session, forecast())
    assert len(reads) == 1
    for _ in range(3):
        ran(session, forecast(0.2), 0.1)
    monkeypatch.setattr(forecast_learning, "FRESH_S", -1.0)
    fresh = calibrated(session, forecast(0.2))
    assert len(reads) == 2 and fresh is not None and fresh.step_time_s == pytest.approx(0.1)


def test_cpu_jobs_learn_under_a_key_of_their_own(session: Session, gpus: None) -> None:
    """A CPU job's defaults were fitted on one 2-core machine: its runs on the hosts at hand scale the next
    CPU forecasts of their kind of model, and neither a GPU's runs nor theirs cross over."""
    for measured in (0.15, 0.15, 0.15):
        ran(session, forecast(0.1, gpu=CPU_DEVICE, kind="other"), measured, host="cpu-box", on_cpu=True)
        ran(session, forecast(0.1, kind="other"), 0.05)  # the same kind on an H200
    on_cpu = calibrated(session, forecast(0.2, gpu=CPU_DEVICE, kind="other"))
    assert on_cpu is not None and on_cpu.step_time_s == pytest.approx(0.3)
    assert on_cpu.basis.endswith("step time x 1.50, learned from 3 runs of other, compiled, on CPU")
    on_h200 = calibrated(session, forecast(0.2, kind="other"))
    assert on_h200 is not None and on_h200.step_time_s == pytest.approx(0.1)


def test_an_old_forecast_without_a_key_is_left_as_it_is(session: Session) -> None:
    old = forecast().model_copy(update={"breakdown": {"model_kind": "transformer"}})
    assert calibrated(session, old) == old
    assert calibrated(session, None) is None

"""Forecast against measured (issue 44): a job's plan.forecast shown with what its trainer measured (the peak
memory and step time in jobs.latest_metrics, read with the row, so no query of its own), and
GET /v1/forecast/accuracy's comparison over the caller's recent finished jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.schemas import ForecastAccuracy, ForecastComparison, ForecastSummary, forecast_ratio
from app.services.keys import Caller
from core.models import Job, Worker
from core.states import JobStatus
from jobspec.forecast import Forecast

MIB = 2**20
FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED)
# The accuracy route looks back over at most this many times `limit` of the caller's newest finished jobs:
# a history of jobs without a forecast (programs, forecasting off) costs a bounded scan, not the table.
LOOK_BACK = 10
PEAK_WITHIN, STEP_WITHIN = 0.10, 0.20  # the targets of issue 44


def measured_figures(device: str | None, latest: Mapping[str, Any]) -> tuple[int | None, float | None]:
    """Peak memory in bytes and step time in seconds from a job's latest metrics. A GPU job's peak is what
    its allocator reserved (what a forecast predicts), else what it allocated from a trainer that did not
    report reserved; a CPU job's is its process's resident peak."""
    names = ("peak_reserved_mb", "peak_mem_mb") if device == "cuda" else ("peak_mem_mb",)
    peak_mb = next((latest[name] for name in names if latest.get(name) is not None), None)
    step_s = latest.get("step_time_s")
    return (None if peak_mb is None else round(peak_mb * MIB)), step_s


def with_measured(plan: dict[str, Any], latest: Mapping[str, Any]) -> dict[str, Any]:
    """The plan with its forecast's measured figures filled in; a plan without a forecast as it is."""
    forecast = plan.get("forecast")
    if not isinstance(forecast, dict):
        return plan
    peak, step = measured_figures(plan.get("device"), latest)
    measured = {"measured_peak_memory_bytes": peak, "measured_step_time_s": step}
    return {**plan, "forecast": {**forecast, **measured}}


def forecast_accuracy(session: Session, caller: Caller, limit: int) -> ForecastAccuracy:
    """The newest `limit` finished jobs the caller may see that have a forecast and measured figures, newest
    first, and how close their forecasts came."""
    recent = select(Job.id).where(Job.status.in_(FINISHED)).order_by(Job.id.desc()).limit(limit * LOOK_BACK)
    if not caller.is_admin:
        recent = recent.where(Job.owner == caller.user)
    query = (
        select(Job.id, Job.name, Job.plan, Job.latest_metrics, Job.host, Job.gpu_ids)
        .where(
            Job.id.in_(recent.scalar_subquery()),
            Job.plan[("forecast", "peak_memory_bytes")].as_float().is_not(None),
            Job.latest_metrics["step_time_s"].as_float().is_not(None),
        )
        .order_by(Job.id.desc())
        .limit(limit)
    )
    rows = session.execute(query).all()
    names = gpu_names(session, {row.host for row in rows if row.gpu_ids})
    data = [comparison(row, names) for row in rows]
    return ForecastAccuracy(data=data, summary=summary(data))


def gpu_names(session: Session, hosts: set[str | None]) -> dict[tuple[str, int], str]:
    """(host, GPU index) -> its model's name, from the workers' inventory: one query for every row."""
    workers = session.execute(select(Worker.host, Worker.gpus).where(Worker.host.in_(hosts))).all()
    return {
        (worker.host, int(gpu["index"])): str(gpu.get("name", ""))
        for worker in workers
        for gpu in worker.gpus or []
        if "index" in gpu
    }


def comparison(row: Any, gpu_names: Mapping[tuple[str, int], str]) -> ForecastComparison:
    forecast = Forecast.model_validate(row.plan["forecast"])
    peak, step = measured_figures(row.plan.get("device"), row.latest_metrics or {})
    kind = forecast.breakdown.get("model_kind")
    return ForecastComparison(
        job_id=row.id,
        name=row.name,
        model_kind=None if kind is None else str(kind),
        gpu=gpu_names.get((row.host, row.gpu_ids[0])) if row.gpu_ids else None,
        forecast_peak_memory_bytes=forecast.peak_memory_bytes,
        measured_peak_memory_bytes=peak,
        peak_ratio=forecast_ratio(forecast.peak_memory_bytes, peak),
        forecast_step_time_s=forecast.step_time_s,
        measured_step_time_s=step,
        step_ratio=forecast_ratio(forecast.step_time_s, step),
    )


def summary(data: Sequence[ForecastComparison]) -> ForecastSummary:
    peaks = [row.peak_ratio for row in data if row.peak_ratio is not None]
    steps = [row.step_ratio for row in data if row.step_ratio is not None]
    return ForecastSummary(
        jobs=len(data),
        peak_ratio_median=median(peaks) if peaks else None,
        step_ratio_median=median(steps) if steps else None,
        within_10pct_peak=sum(abs(r - 1) <= PEAK_WITHIN for r in peaks),
        within_20pct_step=sum(abs(r - 1) <= STEP_WITHIN for r in steps),
    )

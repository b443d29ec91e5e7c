"""The step-time calibration learns from the service's own runs (issue 44). The fitted table
(trainers/forecast/calibration.py) gives a job's step time; the runs that finished since, with their
measured step time beside their forecast, say how far off it is for their key (GPU model, or the CPU, kind of
model, compiled or eager: jobspec/forecast.py's StepKey). A CPU job's defaults were fitted on one 2-core
machine: a host whose cores differ learns its own factor from its first runs. A key's factor is the median of
measured over the table's figure for its newest LEARN_FROM runs, bounded to FACTOR_BOUNDS, and is applied once
it rests on MIN_RUNS.

It is applied after the forecasts' cache (which keeps the table's figures), so a cached forecast takes the
factor of the moment. The factors are read in one query over the newest LOOK_BACK finished jobs, whatever the
table's size, and kept FRESH_S per API process, so a burst of submissions costs one query. Peak memory is not
learned: its overheads are fitted per GPU model and a few runs' ratio could refuse jobs that fit."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import median
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.services.forecast_accuracy import FINISHED, gpu_names, measured_figures
from core.models import Job
from jobspec.forecast import (
    CPU_DEVICE,
    GPU_MODEL,
    TABLE_STEP_TIME,
    Forecast,
    StepKey,
    step_key,
    table_step_time,
)

LEARN_FROM = 20  # the newest runs of a key whose median is its factor: recent enough to follow upgrades
MIN_RUNS = 3  # fewer runs leave the table's figure: one odd run must not move every forecast
FACTOR_BOUNDS = (0.5, 2.0)  # a factor outside says something else is wrong (a throttled GPU, a slow disk)
LOOK_BACK = 500  # the newest finished jobs read for every key together
FRESH_S = 30.0  # how long a process keeps the factors it read
LEARNED_FACTOR = "learned_step_factor"


@dataclass(frozen=True)
class Learned:
    runs: int  # the runs of the key among those read, at most LEARN_FROM
    factor: float | None  # None below MIN_RUNS


def learned(ratios: list[float]) -> Learned:
    """The factor of a key's measured-over-forecast ratios, newest first."""
    newest = ratios[:LEARN_FROM]
    if len(newest) < MIN_RUNS:
        return Learned(len(newest), None)
    low, high = FACTOR_BOUNDS
    return Learned(len(newest), min(max(median(newest), low), high))


def read_factors(session: Session) -> dict[StepKey, Learned]:
    """Every key's factor from the newest LOOK_BACK finished jobs: those with a keyed forecast and a measured
    step time, on the GPU model they were forecast for."""
    recent = select(Job.id).where(Job.status.in_(FINISHED)).order_by(Job.id.desc()).limit(LOOK_BACK)
    rows = session.execute(
        select(Job.plan["forecast"].label("forecast"), Job.latest_metrics, Job.host, Job.gpu_ids)
        .where(
            Job.id.in_(recent.scalar_subquery()),
            Job.plan[("forecast", "breakdown", GPU_MODEL)].as_string().is_not(None),
            Job.latest_metrics["step_time_s"].as_float().is_not(None),
        )
        .order_by(Job.id.desc())
    ).all()
    names = gpu_names(session, {row.host for row in rows if row.gpu_ids})
    ratios: defaultdict[StepKey, list[float]] = defaultdict(list)
    for row in rows:
        if (found := _ratio(row, names)) is not None:
            ratios[found[0]].append(found[1])
    return {key: learned(values) for key, values in ratios.items()}


def _ratio(row: Any, names: dict[tuple[str, int], str]) -> tuple[StepKey, float] | None:
    forecast = row.forecast if isinstance(row.forecast, dict) else {}
    key = step_key(forecast.get("breakdown") or {})
    ran_on = names.get((row.host, row.gpu_ids[0])) if row.gpu_ids else CPU_DEVICE
    _, measured = measured_figures(None, row.latest_metrics or {})
    table = table_step_time(forecast)
    # A run on another GPU model than the one it was forecast for (or on a GPU where a CPU was forecast) says
    # nothing about either.
    if key is None or ran_on != key.gpu_model or not measured or table is None:
        return None
    return key, float(measured) / table


@dataclass
class _Read:
    at: float = float("-inf")  # time.monotonic() of the read
    factors: dict[StepKey, Learned] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


# One per database: tests open many, each with an engine of its own.
_reads: WeakKeyDictionary[Engine, _Read] = WeakKeyDictionary()
_reads_lock = threading.Lock()


def factors(session: Session) -> dict[StepKey, Learned]:
    """The factors, read at most once per FRESH_S per process: the other threads wait for that read."""
    engine = session.get_bind()
    assert isinstance(engine, Engine)
    with _reads_lock:
        read = _reads.setdefault(engine, _Read())
    with read.lock:
        if read.factors is None or time.monotonic() - read.at > FRESH_S:
            read.factors, read.at = read_factors(session), time.monotonic()
        return read.factors


def calibrated(session: Session, forecast: Forecast | None) -> Forecast | None:
    """`forecast` with its step and job time scaled by its key's learned factor, and its basis saying which
    calibration it rests on and how many runs; as it is for one without a key."""
    key = None if forecast is None else step_key(forecast.breakdown)
    if forecast is None or key is None:
        return forecast
    found = factors(session).get(key, Learned(0, None))
    if found.factor is None:
        basis = (
            f"{forecast.basis}; step time from the table: {found.runs} measured runs of {key}, "
            f"{MIN_RUNS} needed to learn from them"
        )
        return forecast.model_copy(update={"basis": basis})
    table = float(forecast.breakdown.get(TABLE_STEP_TIME, forecast.step_time_s))
    step = table * found.factor
    basis = f"{forecast.basis}; step time x {found.factor:.2f}, learned from {found.runs} runs of {key}"
    return forecast.model_copy(
        update={
            "step_time_s": step,
            "job_time_s": None
            if forecast.job_time_s is None
            else forecast.job_time_s / forecast.step_time_s * step,
            "basis": basis,
            "breakdown": {**forecast.breakdown, TABLE_STEP_TIME: table, LEARNED_FACTOR: found.factor},
        }
    )

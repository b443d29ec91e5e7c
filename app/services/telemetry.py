"""Cluster gauges and start-up histograms for Prometheus, read from SQL at scrape time so every API process
reports the same truth."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.core import Metric as Family
from prometheus_client.registry import Collector
from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from app.schemas import as_utc
from app.timings import TO_FIRST_STEP, between, phases
from core import gpu_health
from core.db import new_session
from core.gpu_series import GAUGES, GpuQuantity, split_series
from core.hosts import freshest_per_host, gpu_indices
from core.models import GpuLease, Job, Metric, SweepTrial, Worker, utcnow
from core.states import JobStatus, TrialState
from jobspec.startup import Mark

# Seconds: from a warm start's tenths to a cold compiled job's minutes.
STARTUP_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)


class ClusterCollector(Collector):
    def collect(self) -> Iterator[Family]:
        with new_session() as session:
            by_status = {
                status: count
                for status, count in session.execute(select(Job.status, func.count()).group_by(Job.status))
            }
            leased = session.execute(select(GpuLease.host, func.count()).group_by(GpuLease.host)).all()
            workers = session.execute(select(Worker.id, Worker.host, Worker.heartbeat_at)).all()
            health = gpu_health_states(session)
            telemetry = latest_gpu_telemetry(session)
            timings = session.scalars(select(Job.timings).where(Job.timings.is_not(None))).all()
            trials: dict[str, int] = {
                state: count
                for state, count in session.execute(
                    select(SweepTrial.state, func.count()).group_by(SweepTrial.state)
                )
            }
        jobs = GaugeMetricFamily("trainyard_jobs", "Jobs in each state", labels=["status"])
        for status in JobStatus:
            jobs.add_metric([status], by_status.get(status, 0))
        yield jobs
        by_state = GaugeMetricFamily("trainyard_sweep_trials", "Sweep trials in each state", labels=["state"])
        for state in TrialState:
            by_state.add_metric([state], trials.get(state, 0))
        yield by_state
        depth = by_status.get(JobStatus.QUEUED, 0)
        yield GaugeMetricFamily("trainyard_queue_depth", "Jobs queued and not yet started", value=depth)
        gpus = GaugeMetricFamily("trainyard_gpus_allocated", "GPUs leased to jobs, per host", labels=["host"])
        for host, count in leased:
            gpus.add_metric([host], count)
        yield gpus
        age = GaugeMetricFamily(
            "trainyard_worker_heartbeat_age_seconds",
            "Seconds since each worker last heartbeated; past the lease timeout its jobs are reaped",
            labels=["worker", "host"],
        )
        now = utcnow()
        for worker_id, host, heartbeat_at in workers:
            age.add_metric([worker_id, host], (now - as_utc(heartbeat_at)).total_seconds())
        yield age
        by_health = GaugeMetricFamily(
            "trainyard_gpu_health",
            "1 for each GPU's health (ok, degraded or drained); GET /v1/gpus says why",
            labels=["host", "gpu", "health"],
        )
        for (host, index), said in sorted(health.items()):
            by_health.add_metric([host, str(index), said], 1)
        yield by_health
        for quantity, (name, documentation) in GAUGES.items():
            gauge = GaugeMetricFamily(name, documentation, labels=["job", "gpu"])
            for job_id, gpu, value in telemetry.get(quantity, []):
                gauge.add_metric([str(job_id), gpu], value)
            yield gauge
        yield startup_histogram(stored for stored in timings if stored)


def gpu_health_states(session: Session) -> dict[tuple[str, int], str]:
    """Each reported GPU's health: its newest worker report's GPUs, judged by core/gpu_health.py."""
    judged = gpu_health.judged(session)
    return {
        (host, gpu): judged[host, gpu].state if (host, gpu) in judged else gpu_health.GpuState.OK.value
        for host, worker in freshest_per_host(session.scalars(select(Worker))).items()
        for gpu in gpu_indices(worker)
    }


def startup_histogram(stored: Iterable[Mapping[str, Any]]) -> HistogramMetricFamily:
    """Every job's latest start-up (jobs.timings): each phase it holds, and the whole of it to the first
    step."""
    observed: dict[str, list[float]] = {}
    for timings in stored:
        marks = timings["marks"]
        seen = phases(marks)
        if (whole := between(marks, Mark.QUEUED, Mark.FIRST_STEP)) is not None:
            seen.append((TO_FIRST_STEP, whole))
        for phase, seconds in seen:
            observed.setdefault(phase, []).append(seconds)
    family = HistogramMetricFamily(
        "trainyard_job_startup_seconds",
        "Seconds of each phase of a job's start-up, its latest attempt's, and to_first_step: all of them",
        labels=["phase"],
    )
    for phase, values in observed.items():
        buckets = [(str(bound), sum(value <= bound for value in values)) for bound in STARTUP_BUCKETS]
        family.add_metric([phase], [*buckets, ("+Inf", len(values))], sum_value=sum(values))
    return family


def latest_gpu_telemetry(session: Session) -> dict[GpuQuantity, list[tuple[int, str, float]]]:
    """The newest sample of each running job's GPUs (worker/executors/local/telemetry.py), by quantity: (job,
    GPU, value)."""
    newest = (
        select(Metric.job_id, Metric.name, func.max(Metric.step).label("step"))
        .join(Job, Job.id == Metric.job_id)
        .where(Job.status == JobStatus.RUNNING, Metric.name.like("gpu%/%"))
        .group_by(Metric.job_id, Metric.name)
        .subquery()
    )
    rows = session.execute(
        select(Metric.job_id, Metric.name, Metric.value).join(
            newest,
            and_(
                Metric.job_id == newest.c.job_id, Metric.name == newest.c.name, Metric.step == newest.c.step
            ),
        )
    )
    by_quantity: dict[GpuQuantity, list[tuple[int, str, float]]] = {}
    for job_id, name, value in rows:
        series = split_series(name)
        if series is not None:
            by_quantity.setdefault(series[0], []).append((job_id, series[1], value))
    return by_quantity

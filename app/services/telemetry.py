"""Cluster gauges for Prometheus, read from SQL at scrape time so every API process reports the same truth."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from app.schemas import as_utc
from core.db import new_session
from core.models import GpuLease, Job, Worker, utcnow
from core.states import JobStatus


class ClusterCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        with new_session() as session:
            by_status = {
                status: count
                for status, count in session.execute(select(Job.status, func.count()).group_by(Job.status))
            }
            leased = session.execute(select(GpuLease.host, func.count()).group_by(GpuLease.host)).all()
            workers = session.execute(select(Worker.id, Worker.host, Worker.heartbeat_at)).all()
        jobs = GaugeMetricFamily("trainyard_jobs", "Jobs in each state", labels=["status"])
        for status in JobStatus:
            jobs.add_metric([status], by_status.get(status, 0))
        yield jobs
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

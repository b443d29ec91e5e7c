"""GPU inventory as the workers report it: per GPU for GET /v1/gpus, and per host for the planner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from app.schemas import GpuHealthChanged, GpuPublic, HostGpus, HostsPublic, as_utc
from app.services.errors import GpuNotFound
from core import gpu_health
from core.config import Settings
from core.executors import executor_traits
from core.hosts import freshest_per_host, gpu_indices, heartbeat_cutoff, live_hosts
from core.models import GpuHealth, GpuLease, Worker
from jobspec.cluster import Inventory
from jobspec.plan import NO_HOSTS


def _health(row: GpuHealth | None) -> dict[str, str | None]:
    if row is None:
        return {"health": "ok", "health_reason": None}
    return {
        "health": row.state,
        "health_reason": f"{row.reason} ({_SAID_BY[row.source]}, {row.since:%Y-%m-%d %H:%M} UTC)",
    }


_SAID_BY: dict[str, str] = {
    gpu_health.HealthSource.NVML: "NVML",
    gpu_health.HealthSource.ADMIN: "an admin",
    gpu_health.HealthSource.JOBS: "a job's device errors",
}


def list_host_gpus(session: Session, settings: Settings) -> HostsPublic:
    holders = {(lease.host, lease.gpu_index): lease.job_id for lease in session.scalars(select(GpuLease))}
    judged = gpu_health.judged(session)
    live = live_hosts(session, settings)
    hosts = [
        HostGpus(
            host=host,
            address=worker.address,
            status="up" if host in live else "down",
            worker_id=worker.id,
            heartbeat_at=worker.heartbeat_at,
            gpus=[
                GpuPublic.model_validate(
                    {
                        **gpu,
                        "job_id": holders.get((host, int(gpu["index"]))),
                        **_health(judged.get((host, int(gpu["index"])))),
                    }
                )
                for gpu in sorted(worker.gpus, key=lambda gpu: int(gpu["index"]))
            ],
        )
        for host, worker in sorted(freshest_per_host(session.scalars(select(Worker))).items())
    ]
    return HostsPublic(data=hosts)


# Built once: every submission reads it, and a statement built anew costs its cache key each time. Read on
# the session's connection (Core): the ORM's execution path adds nothing to plain rows.
_REPORTS = select(Worker.host, Worker.gpus, Worker.cpus, Worker.memory_mb, Worker.heartbeat_at)


@dataclass(frozen=True)
class Cluster:
    """The workers' last reports, as a submission reads them once: the inventory its plan is judged against,
    and the reports its forecast's target is chosen from (app/services/forecasts.py's target_for)."""

    reports: list[Row[Any]]
    inventory: Inventory


def read_cluster(session: Session, settings: Settings) -> Cluster:
    """The last report of each live host's worker. While no host is live (workers restarting) the last
    report of each stands in, so a submission is judged against the cluster as last seen rather than refused
    outright. The inventory is GPU ids per host; where the executor's scheduler places jobs (Slurm), there is
    none to judge against: a spec that no node can run waits with the scheduler's reason."""
    reports = session.connection().execute(_REPORTS).all()
    cutoff = heartbeat_cutoff(settings)
    live = [report for report in reports if as_utc(report.heartbeat_at) > cutoff]
    freshest = list(freshest_per_host(live or reports).values())
    if not executor_traits(settings).places_jobs:
        return Cluster(freshest, NO_HOSTS)
    return Cluster(freshest, Inventory({report.host: tuple(gpu_indices(report)) for report in freshest}))


def _known(session: Session, settings: Settings, host: str, index: int) -> None:
    """Raise GpuNotFound unless a worker reported GPU `index` on `host`. Where the executor's scheduler
    places jobs (Slurm), no worker reports its nodes: `host` is a node's name, and Slurm judges it."""
    if not executor_traits(settings).places_jobs:
        return
    workers = freshest_per_host(session.scalars(select(Worker)))
    if host not in workers:
        hosts = ", ".join(sorted(workers)) or "none"
        raise GpuNotFound(f"no worker registered host {host!r} (hosts: {hosts}); see GET /v1/gpus")
    indices = gpu_indices(workers[host])
    if index not in indices:
        have = ", ".join(str(gpu) for gpu in indices) or "none"
        raise GpuNotFound(f"host {host} has no GPU {index} (its GPUs: {have}); see GET /v1/gpus")


def drain_gpu(session: Session, settings: Settings, host: str, index: int, reason: str) -> GpuHealthChanged:
    """Nothing new on it; its running job asked to stop at its next checkpoint, to resume elsewhere."""
    _known(session, settings, host, index)
    stopped = gpu_health.drain(session, host, index, reason)
    session.commit()
    said = _health(session.get(GpuHealth, (host, index)))
    return GpuHealthChanged(host=host, index=index, **said, jobs_stopped=stopped)


def undrain_gpu(session: Session, settings: Settings, host: str, index: int) -> GpuHealthChanged:
    """Ok again, whoever judged it: the admin says it is sound (after a reset, say)."""
    _known(session, settings, host, index)
    gpu_health.undrain(session, host, index)
    session.commit()
    return GpuHealthChanged(host=host, index=index, health="ok", health_reason=None, jobs_stopped=[])

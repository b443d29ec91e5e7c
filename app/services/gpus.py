"""GPU inventory as the workers report it: per GPU for GET /v1/gpus, and per host for the planner."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.schemas import GpuPublic, HostGpus, HostsPublic, as_utc
from core.config import Settings
from core.executors import executor_traits
from core.hosts import freshest_per_host, gpu_indices, heartbeat_cutoff, live_hosts
from core.models import GpuLease, Worker
from jobspec.cluster import Inventory
from jobspec.plan import NO_HOSTS


def list_host_gpus(session: Session, settings: Settings) -> HostsPublic:
    holders = {(lease.host, lease.gpu_index): lease.job_id for lease in session.scalars(select(GpuLease))}
    live = live_hosts(session, settings)
    hosts = [
        HostGpus(
            host=host,
            address=worker.address,
            status="up" if host in live else "down",
            worker_id=worker.id,
            heartbeat_at=worker.heartbeat_at,
            gpus=[
                GpuPublic.model_validate({**gpu, "job_id": holders.get((host, int(gpu["index"])))})
                for gpu in sorted(worker.gpus, key=lambda gpu: int(gpu["index"]))
            ],
        )
        for host, worker in sorted(freshest_per_host(session.scalars(select(Worker))).items())
    ]
    return HostsPublic(data=hosts)


def read_inventory(session: Session, settings: Settings) -> Inventory:
    """GPU ids per live host, for the planner to judge a spec against. While no host is live (workers
    restarting) the last report of each stands in, so a submission is judged against the cluster as last
    seen rather than refused outright. Where the executor's scheduler places jobs (Slurm), there is no
    inventory to judge against: a spec that no node can run waits with the scheduler's reason."""
    if not executor_traits(settings).places_jobs:
        return NO_HOSTS
    reports = session.execute(select(Worker.host, Worker.gpus, Worker.heartbeat_at)).all()
    cutoff = heartbeat_cutoff(settings)
    live = [report for report in reports if as_utc(report.heartbeat_at) > cutoff]
    return Inventory(
        {host: tuple(gpu_indices(report)) for host, report in freshest_per_host(live or reports).items()}
    )

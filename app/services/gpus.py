"""GPU inventory as the workers report it, and the submit-time check that a spec's GPUs can exist."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.schemas import GpuPublic, HostGpus, HostsPublic, as_utc
from app.services.errors import InvalidSpec
from core.config import Settings
from core.hosts import freshest_per_host, gpu_indices, heartbeat_cutoff, live_hosts
from core.models import GpuLease, Worker
from trainers.spec import ParallelSpec


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


def _inventory(session: Session, settings: Settings) -> dict[str, list[int]]:
    """GPU ids per live host; while no host is live (workers restarting) the last report of each stands in,
    so a submission is judged against the cluster as last seen rather than refused outright."""
    reports = session.execute(select(Worker.host, Worker.gpus, Worker.heartbeat_at)).all()
    cutoff = heartbeat_cutoff(settings)
    live = [report for report in reports if as_utc(report.heartbeat_at) > cutoff]
    return {host: gpu_indices(report) for host, report in freshest_per_host(live or reports).items()}


def _has(ids: list[int]) -> str:
    return "has GPUs " + ", ".join(map(str, ids)) if ids else "has no GPUs"


def _check_hosts(inventory: dict[str, list[int]], parallel: ParallelSpec) -> None:
    hosts = ", ".join(sorted(inventory))
    if parallel.host is not None and parallel.host not in inventory:
        raise InvalidSpec("parallel.host", f"no worker registered host {parallel.host}; hosts: {hosts}")
    if parallel.nnodes > len(inventory):
        raise InvalidSpec(
            "parallel.nnodes",
            f"{parallel.nnodes} hosts asked for but {len(inventory)} are registered ({hosts}); "
            f"ask for at most {len(inventory)}",
        )


def check_gpus_exist(session: Session, settings: Settings, parallel: ParallelSpec) -> None:
    """Refuse hosts and GPUs no registered host has. With no worker registered yet, accept: the worker that
    places the job fails it as infeasible if it cannot fit."""
    inventory = _inventory(session, settings)
    if not inventory:
        return
    _check_hosts(inventory, parallel)
    if parallel.host is not None:
        inventory = {parallel.host: inventory[parallel.host]}
    if not parallel.gpus and not parallel.num_gpus:
        return
    if parallel.gpus is not None:
        wanted = set(parallel.gpus)
        if any(wanted <= set(ids) for ids in inventory.values()):
            return
        if len(inventory) == 1:
            [ids] = inventory.values()
            missing = min(wanted - set(ids))
            raise InvalidSpec("parallel.gpus", f"GPU {missing} does not exist on this host (it {_has(ids)})")
        hosts = "; ".join(f"{host} {_has(ids)}" for host, ids in sorted(inventory.items()))
        listed = ", ".join(map(str, parallel.gpus))
        raise InvalidSpec("parallel.gpus", f"no single host has GPUs {listed} ({hosts})")
    most = max(len(ids) for ids in inventory.values())
    if parallel.num_gpus and parallel.num_gpus > most:
        fix = f"ask for at most {most}" if most else "leave parallel.num_gpus out to train on CPU"
        raise InvalidSpec(
            "parallel.num_gpus",
            f"{parallel.num_gpus} GPUs asked for but the largest host has {most}; {fix}",
        )

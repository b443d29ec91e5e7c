"""The hosts and GPUs workers report with their heartbeats, as both the API and the scheduler read them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.config import Settings
from core.models import Worker, utcnow

# A GPU's entry in its worker's report: the seconds its host spends on one tiny eager CUDA operation
# (worker/executors/local/host_probe.py), which the forecast scales an eager step's host side by; absent
# where the host was not probed.
HOST_OP_S = "host_op_s"


class WorkerReport(Protocol):
    """What these views read of a worker's row: a Worker, or a Core row of just these columns."""

    @property
    def host(self) -> str: ...
    @property
    def gpus(self) -> list[dict[str, Any]]: ...
    @property
    def heartbeat_at(self) -> datetime: ...


R = TypeVar("R", bound=WorkerReport)


def freshest_per_host(workers: Iterable[R]) -> dict[str, R]:
    """A restarted worker leaves its old row behind until the reaper drops it; the newest heartbeat speaks."""
    hosts: dict[str, R] = {}
    for worker in workers:
        if worker.host not in hosts or worker.heartbeat_at > hosts[worker.host].heartbeat_at:
            hosts[worker.host] = worker
    return hosts


def heartbeat_cutoff(settings: Settings) -> datetime:
    """A worker whose last heartbeat is older than this is not live."""
    return utcnow() - timedelta(seconds=settings.lease_timeout_s)


def live_hosts(session: Session, settings: Settings) -> dict[str, Worker]:
    cutoff = heartbeat_cutoff(settings)
    return freshest_per_host(session.scalars(select(Worker).where(Worker.heartbeat_at > cutoff)))


def gpu_indices(worker: WorkerReport) -> list[int]:
    return sorted(int(gpu["index"]) for gpu in worker.gpus)


def cores_text(count: int) -> str:
    """'1 CPU core', '2 CPU cores': what a CPU job takes, as the queue's reasons and its `wants` say it."""
    return f"{count} CPU core{'s' if count != 1 else ''}"

"""When each waiting job would start (issue 44): the queue played forward on the live hosts' GPUs and CPU
cores, the running jobs ending when their rate or their forecast says, and the queued jobs ahead, in start
order, each taking the GPUs (or cores) that free up first for as long as its forecast `job_time_s`.

An estimate, simpler than the workers' placement: it neither backfills a gap before a job's reservation nor
preempts, and a job's waiting for others (depends_on) is not played (its start is not known). A job whose GPUs
may be freed by a job with no forecast (a program, an unbounded length) has no start (None, saying which
job), unless it starts now whatever that job does. Only the first DEPTH jobs of the queue are played: a
request's play costs at most DEPTH times the hosts' GPUs and cores, whatever the queue's depth."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.jobs import progress_of
from core.clock import as_utc
from core.config import Settings
from core.hosts import gpu_indices, live_hosts
from core.models import GpuLease, Job, JobNode
from core.states import ACTIVE, JobStatus
from jobspec.plan import Plan

DEPTH = 200  # queued jobs played forward, in start order; those after it say so
BEYOND = f"more than {DEPTH} jobs ahead: not estimated"
UNKNOWN = math.inf  # a slot held by a job whose end is not known


@dataclass
class Slot:
    """A GPU or a CPU core: when it is free (seconds from now), and by whom it is held until then."""

    free_at: float = 0.0
    holder: int | None = None


@dataclass
class HostSlots:
    name: str
    gpus: dict[int, Slot] = field(default_factory=dict)
    cores: list[Slot] = field(default_factory=list)


@dataclass(frozen=True)
class Waiting:
    job_id: int
    plan: Plan
    waits_for_jobs: bool  # depends_on not met yet: placement passes it over


@dataclass(frozen=True)
class Start:
    in_s: float | None
    note: str | None  # why there is no start


def play(hosts: list[HostSlots], queue: Sequence[Waiting]) -> dict[int, Start]:
    """Each of `queue`'s jobs' start, in queue order: each takes the slots that free up first, and holds
    them for its forecast job_time_s (or until a time not known)."""
    starts: dict[int, Start] = {}
    for job in queue:
        if job.waits_for_jobs:
            starts[job.job_id] = Start(None, "waits for the jobs it depends on")
        else:
            starts[job.job_id] = _place(hosts, job)
    return starts


def _place(hosts: list[HostSlots], job: Waiting) -> Start:
    plan = job.plan
    able = [
        (host, slots)
        for host in hosts
        if (plan.host is None or host.name == plan.host) and (slots := _candidates(host, plan))
    ]
    need = _need(plan)
    # Each host's earliest start: when the need-th of its slots frees.
    ready = sorted(
        (
            (sorted(s.free_at for s in slots)[need - 1], host, slots)
            for host, slots in able
            if len(slots) >= need
        ),
        key=lambda found: (found[0], found[1].name),
    )
    if len(ready) < plan.nnodes:
        return Start(None, "no live host has what it asks for")
    chosen = ready[: plan.nnodes]
    start = max(at for at, _, _ in chosen)
    if start > 0:
        # A slot held for a time not known may free sooner than `start`.
        blockers = sorted({s.holder for _, slots in able for s in slots if s.free_at == UNKNOWN and s.holder})
        if blockers:
            return Start(None, f"job {blockers[0]} ahead of it has no forecast of how long it runs")
    ends = start + _job_time(job)
    for _, _, slots in chosen:
        for slot in sorted(slots, key=lambda s: s.free_at)[:need]:
            slot.free_at, slot.holder = ends, job.job_id
    return Start(round(start, 1), None)


def _need(plan: Plan) -> int:
    return len(plan.gpus) if plan.gpus else plan.num_gpus or max(plan.cpu_cores, 1)


def _candidates(host: HostSlots, plan: Plan) -> list[Slot]:
    if plan.gpus:
        return [host.gpus[gpu] for gpu in plan.gpus] if set(plan.gpus) <= host.gpus.keys() else []
    return list(host.gpus.values()) if plan.num_gpus else host.cores


def _job_time(job: Waiting) -> float:
    forecast = job.plan.forecast
    return UNKNOWN if forecast is None or forecast.job_time_s is None else forecast.job_time_s


def remaining_s(job: Job, now: datetime) -> float:
    """How long a job holding GPUs or cores still runs: at the rate it has shown, else its forecast less
    what it has run; UNKNOWN without either. A job being cancelled frees them at once."""
    if job.status == JobStatus.CANCELLING:
        return 0.0
    if (eta := progress_of(job, now).eta_s) is not None:
        return eta
    forecast = Plan.model_validate(job.plan).forecast
    if forecast is None or forecast.job_time_s is None:
        return UNKNOWN
    since = job.running_at or job.started_at
    elapsed = 0.0 if since is None else (now - as_utc(since)).total_seconds()
    return max(forecast.job_time_s - elapsed, 0.0)


def host_slots(session: Session, settings: Settings, now: datetime) -> list[HostSlots]:
    """The live hosts' GPUs and cores, each held until its job's remaining time: a query of the workers, of
    the leases and of the active jobs, each bounded by the hardware, not by the queue."""
    hosts = {
        name: HostSlots(
            name,
            {gpu: Slot() for gpu in gpu_indices(worker)},
            [Slot() for _ in range(int((worker.cpus or 0) * settings.cpu_overcommit))],
        )
        for name, worker in sorted(live_hosts(session, settings).items())
    }
    active = {job.id: job for job in session.scalars(select(Job).where(Job.status.in_(ACTIVE)))}
    left = {job_id: remaining_s(job, now) for job_id, job in active.items()}
    for lease in session.scalars(select(GpuLease).where(GpuLease.job_id.in_(active))):
        if (host := hosts.get(lease.host)) and (slot := host.gpus.get(lease.gpu_index)):
            slot.free_at, slot.holder = left[lease.job_id], lease.job_id
    # The jobs read above, not those active now: each query sees the latest commit, and a job may have
    # started since.
    nodes = session.execute(
        select(JobNode.host, JobNode.job_id)
        .join(Job, Job.id == JobNode.job_id)
        .where(JobNode.job_id.in_(active), JobNode.attempt == Job.attempt)
    )
    for host_name, job_id in nodes:
        if (host := hosts.get(host_name)) is not None:
            _hold(host.cores, Plan.model_validate(active[job_id].plan).cpu_cores, left[job_id], job_id)
    return list(hosts.values())


def _hold(cores: Iterable[Slot], count: int, until: float, job_id: int) -> None:
    for slot in [slot for slot in cores if slot.free_at == 0.0][:count]:
        slot.free_at, slot.holder = until, job_id

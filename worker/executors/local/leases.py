"""Claiming a queued job and leasing its GPUs in one transaction; the lease primary key settles every race."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from enum import StrEnum

from sqlalchemy import ColumnElement, Select, delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core.config import get_settings
from core.db import session_scope
from core.doorbell import ring_unless_pending
from core.gpu_health import avoided, drained
from core.hosts import freshest_per_host, gpu_indices, live_hosts
from core.models import GpuLease, Job, JobNode, Worker, utcnow
from core.queue_order import START_ORDER
from core.states import ACTIVE, JobStatus
from core.transitions import move
from jobspec.plan import Plan
from jobspec.startup import Mark
from worker.attempts.starting import begin_attempt, worker_id
from worker.executors.local.host_choice import (
    HostView,
    NodeChoice,
    choose_nodes,
    jobs_text,
    never_fits,
    reserve,
    wants_gpus,
)
from worker.executors.local.preempt import PreemptRaced, preempt_for

WAITING_FOR_GPUS = "waiting_for_gpus"
WAITING_FOR_CORES = "waiting_for_cores"
CLAIM_TRIES = 3


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"
    WAITING = "waiting"
    INFEASIBLE = "infeasible"
    NOT_QUEUED = "not_queued"  # a cancel or another delivery got there first


@dataclass(frozen=True)
class Claim:
    job_id: int
    outcome: ClaimOutcome
    attempt: int = 0
    nodes: list[NodeChoice] = field(default_factory=list)

    @property
    def gpu_ids(self) -> list[int]:
        """Node 0's GPUs: all of them for a one-host job."""
        return self.nodes[0].gpu_ids if self.nodes else []


def host_views(session: Session) -> list[HostView]:
    """Every host a worker ever registered (its newest row), with what its GPUs hold and its active jobs."""
    settings = get_settings()
    live = live_hosts(session, settings)
    known = freshest_per_host(session.scalars(select(Worker)))
    held: dict[str, dict[int, int]] = {}
    for host, gpu, job in session.execute(select(GpuLease.host, GpuLease.gpu_index, GpuLease.job_id)):
        held.setdefault(host, {})[gpu] = job
    active_nodes = session.execute(
        select(JobNode.host, Job.id, Job.plan)
        .join(Job, Job.id == JobNode.job_id)
        .where(Job.status.in_(ACTIVE), JobNode.attempt == Job.attempt)
    )
    active: Counter[str] = Counter()
    cores: dict[str, dict[int, int]] = {}
    for host, job_id, plan in active_nodes:
        active[host] += 1
        if taken := Plan.model_validate(plan).cpu_cores:
            cores.setdefault(host, {})[job_id] = taken
    off = drained(session)
    return [
        HostView(
            name=host,
            address=worker.address,
            gpu_ids=gpu_indices(worker),
            live=host in live,
            held=held.get(host, {}),
            active_jobs=active[host],
            cpus=None if worker.cpus is None else max(1, int(worker.cpus * settings.cpu_overcommit)),
            cpu_held=cores.get(host, {}),
            off={gpu: f"drained ({why})" for gpu, why in off.get(host, {}).items()},
        )
        for host, worker in sorted(known.items())
    ]


def _avoiding(session: Session, job_id: int, hosts: list[HostView]) -> list[HostView]:
    """`hosts` as this job sees them: the GPUs it failed on twice with device errors are off for it."""
    faulty = avoided(session, job_id)
    why = "off for this job: it failed there twice with device errors"
    return [
        replace(host, off={**{gpu: why for gpu in faulty[host.name]}, **host.off})
        if host.name in faulty
        else host
        for host in hosts
    ]


def _reserved_ahead(session: Session, job: Job, hosts: list[HostView]) -> list[HostView]:
    """`hosts` with what the queued jobs that `job` must not delay would take marked held: every one of a
    higher priority, and the first in start order whatever its priority, so that a job that needs more than
    is free now is not overtaken for ever by smaller ones that keep taking what comes free. A job starts
    before them only with what they leave (backfill)."""
    first = session.scalar(_queued().limit(1))
    ahead = session.scalars(
        select(Job)
        .where(Job.status == JobStatus.QUEUED, Job.waiting_on == 0, Job.id != job.id)
        .where(or_(Job.priority > job.priority, Job.id == first))
        .order_by(*START_ORDER)
    )
    for other in ahead:
        hosts = reserve(hosts, other.id, Plan.model_validate(other.plan))
    return hosts


def _set_waiting(job_id: int, message: str, reason: str = WAITING_FOR_GPUS) -> None:
    # Not a transition, so no job_events row; guarded so it never overwrites a job that moved on.
    with session_scope() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.QUEUED)
            .values(status_reason=reason, message=message)
        )


def _reservers(hosts: list[HostView], reserved: list[HostView]) -> list[int]:
    """The jobs that `reserved` marks on GPUs or cores that `hosts` left free."""
    takers = {job for host in hosts for job in host.takers}
    return sorted({job for host in reserved for job in host.takers} - takers)


def claim_job(job_id: int) -> Claim:
    """Move the job queued -> starting and lease a host and GPUs for each of its nodes atomically, or leave
    it waiting, or fail it when no registered host could ever run it."""
    for _ in range(CLAIM_TRIES):
        try:
            return _try_claim(job_id)
        except (IntegrityError, PreemptRaced):
            # Another job leased one of our GPUs between our look and our insert, or a victim moved on
            # before we stopped it: look again, since num_gpus jobs may still fit on the GPUs that are left.
            continue
    _set_waiting(job_id, f"waiting: other jobs took what it needs first {CLAIM_TRIES} times in a row")
    return Claim(job_id, ClaimOutcome.WAITING)


def _try_claim(job_id: int) -> Claim:
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.QUEUED:
            return Claim(job_id, ClaimOutcome.NOT_QUEUED)
        if job.waiting_on:  # its depends_on: released, and rung for, by core/dependencies.py
            return Claim(job_id, ClaimOutcome.WAITING)
        plan = Plan.model_validate(job.plan)
        hosts = host_views(session)
        reason = never_fits(plan, hosts) if hosts else None
        if reason is not None:
            moved = move(
                session, job_id, JobStatus.QUEUED, JobStatus.FAILED, reason="infeasible", message=reason
            )
            return Claim(job_id, ClaimOutcome.INFEASIBLE if moved else ClaimOutcome.NOT_QUEUED)
        reserved = _avoiding(session, job_id, _reserved_ahead(session, job, hosts))
        nodes, wait = choose_nodes(plan, reserved)
        ahead = _reservers(hosts, reserved)
        if wait is not None and ahead:
            starts = "starts" if len(ahead) == 1 else "start"
            wait += f" (kept for queued {jobs_text(ahead)}, which {starts} first)"
        if wait is not None:
            # Decided here rather than in the reaper: this is the moment a job fails to place, with its plan,
            # the hosts and the GPUs reserved for higher priorities already read, in a transaction whose
            # compare-and-sets make two claims at once stop each victim once.
            wait = preempt_for(session, job, plan, reserved, wait)
    if wait is not None:
        _set_waiting(job_id, wait, WAITING_FOR_GPUS if wants_gpus(plan) else WAITING_FOR_CORES)
        return Claim(job_id, ClaimOutcome.WAITING)
    with session_scope() as session:
        message = f"placed by worker {worker_id()} on {_where(nodes)}"
        claimed = begin_attempt(
            session, job_id, message, nodes[0].host, (Mark.PLACED,), gpu_ids=nodes[0].gpu_ids
        )
        if claimed is None:
            return Claim(job_id, ClaimOutcome.NOT_QUEUED)
        session.add_all(
            GpuLease(host=node.host, gpu_index=gpu, job_id=job_id) for node in nodes for gpu in node.gpu_ids
        )
        attempt = claimed.attempt
        now = utcnow()
        session.execute(delete(JobNode).where(JobNode.job_id == job_id))
        session.add_all(
            JobNode(
                job_id=job_id,
                node_rank=node.node_rank,
                attempt=attempt,
                host=node.host,
                address=node.address,
                gpu_ids=node.gpu_ids,
                heartbeat_at=now,
            )
            for node in nodes
        )
        session.flush()
    return Claim(job_id, ClaimOutcome.CLAIMED, attempt=attempt, nodes=nodes)


def _where(nodes: list[NodeChoice]) -> str:
    return ", ".join(
        f"{node.host} GPUs [{', '.join(map(str, node.gpu_ids))}]" if node.gpu_ids else f"{node.host} CPU"
        for node in nodes
    )


def _queued(*where: ColumnElement[bool]) -> Select[tuple[int]]:
    """Those that may start: a job waiting for its depends_on is neither placed nor kept room for."""
    return (
        select(Job.id)
        .where(Job.status == JobStatus.QUEUED, Job.waiting_on == 0, *where)
        .order_by(*START_ORDER)
    )


def claim_next() -> Claim | None:
    """Claim the first queued job, in start order, that can be placed now; None when none can. Those passed
    over stay queued with the reason they wait (or fail as infeasible)."""
    with session_scope() as session:
        queued = list(session.scalars(_queued()))
    for job_id in queued:
        claim = claim_job(job_id)
        if claim.outcome is ClaimOutcome.CLAIMED:
            return claim
    return None


def ring_waiting_jobs(*where: ColumnElement[bool]) -> int | None:
    """Ring once for the queued jobs (those meeting `where`), now that a worker slot or GPUs may be free,
    unless a ring already waits: the worker it wakes claims them in start order. The job rung for, or None
    when none was rung."""
    with session_scope() as session:
        first = session.scalar(_queued(*where).limit(1))
    return first if first is not None and ring_unless_pending(first) else None

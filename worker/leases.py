"""Claiming a queued job and leasing its GPUs in one transaction; the lease primary key settles every race."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.db import session_scope
from app.models import GpuLease, Job, utcnow
from app.services.transitions import move
from app.states import JobStatus
from trainers.plan import Plan
from worker.celery_app import enqueue_job

WAITING_FOR_GPUS = "waiting_for_gpus"
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
    gpu_ids: list[int] = field(default_factory=list)


def worker_id() -> str:
    return f"{get_settings().hostname}:{os.getpid()}"


def _format_ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids) or "none"


def infeasibility(plan: Plan, host_gpu_ids: list[int], host: str) -> str | None:
    """Why this host can never run the plan, or None when it could once its GPUs are free."""
    have = f"host {host} has GPUs [{_format_ids(host_gpu_ids)}]"
    if plan.gpus is not None:
        missing = sorted(set(plan.gpus) - set(host_gpu_ids))
        if missing:
            return f"asked for GPUs [{_format_ids(plan.gpus)}] but {have} (no GPU {_format_ids(missing)})"
    elif plan.num_gpus > len(host_gpu_ids):
        return f"asked for {plan.num_gpus} GPUs but {have}"
    return None


def pick_gpus(plan: Plan, host_gpu_ids: list[int], held: dict[int, int]) -> tuple[list[int], str | None]:
    """The GPUs to lease given those held (gpu -> job), or ([], the reason to wait)."""
    if plan.gpus is not None:
        busy = [gpu for gpu in plan.gpus if gpu in held]
        if busy:
            return [], "waiting for " + ", ".join(f"GPU {gpu}, held by job {held[gpu]}" for gpu in busy)
        return sorted(plan.gpus), None
    free = [gpu for gpu in sorted(host_gpu_ids) if gpu not in held]
    if len(free) < plan.num_gpus:
        holders = ", ".join(f"GPU {gpu} by job {job}" for gpu, job in sorted(held.items()))
        return [], f"waiting for {plan.num_gpus} free GPUs, {len(free)} free; held: {holders}"
    return free[: plan.num_gpus], None


def _held_gpus(session: Session, host: str) -> dict[int, int]:
    rows = session.execute(select(GpuLease.gpu_index, GpuLease.job_id).where(GpuLease.host == host))
    return {gpu: job for gpu, job in rows}


def _with_higher_priority_reservations(
    session: Session, job: Job, host: str, host_gpu_ids: list[int], held: dict[int, int]
) -> dict[int, int]:
    """`held` plus the GPUs that queued jobs of higher priority, which this host can run, would take: a job
    that starts first must not be one that lets a lower priority slip onto the GPUs a higher one waits for."""
    taken = dict(held)
    ahead = session.scalars(
        select(Job)
        .where(Job.status == JobStatus.QUEUED, Job.priority > job.priority)
        .order_by(Job.priority.desc(), Job.id)
    )
    for other in ahead:
        plan = Plan.model_validate(other.plan)
        if not (plan.gpus or plan.num_gpus) or infeasibility(plan, host_gpu_ids, host) is not None:
            continue
        free = [gpu for gpu in sorted(host_gpu_ids) if gpu not in taken]
        wanted = plan.gpus if plan.gpus is not None else free[: plan.num_gpus]
        taken.update({gpu: other.id for gpu in wanted if gpu not in taken})
    return taken


def _set_waiting(job_id: int, message: str) -> None:
    # Not a transition, so no job_events row; guarded so it never overwrites a job that moved on.
    with session_scope() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.QUEUED)
            .values(status_reason=WAITING_FOR_GPUS, message=message)
        )


def claim_job(job_id: int, host_gpu_ids: list[int]) -> Claim:
    """Move the job queued -> starting and lease its GPUs atomically, or leave it waiting, or fail it."""
    for _ in range(CLAIM_TRIES):
        try:
            return _try_claim(job_id, host_gpu_ids)
        except IntegrityError:
            # Another job leased one of our GPUs between our look and our insert: look again, since
            # num_gpus jobs may still fit on the GPUs that are left.
            continue
    _set_waiting(job_id, f"waiting for GPUs: other jobs took them first {CLAIM_TRIES} times in a row")
    return Claim(job_id, ClaimOutcome.WAITING)


def _try_claim(job_id: int, host_gpu_ids: list[int]) -> Claim:
    host = get_settings().hostname
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.QUEUED:
            return Claim(job_id, ClaimOutcome.NOT_QUEUED)
        plan = Plan.model_validate(job.plan)
        reason = infeasibility(plan, host_gpu_ids, host)
        if reason is not None:
            moved = move(
                session, job_id, JobStatus.QUEUED, JobStatus.FAILED, reason="infeasible", message=reason
            )
            return Claim(job_id, ClaimOutcome.INFEASIBLE if moved else ClaimOutcome.NOT_QUEUED)
        held = _held_gpus(session, host)
        taken = _with_higher_priority_reservations(session, job, host, host_gpu_ids, held)
        gpu_ids, wait = pick_gpus(plan, host_gpu_ids, taken)
        if wait is not None and taken.keys() - held.keys():
            ahead = sorted(set(taken.values()) - set(held.values()))
            wait += f" (queued jobs {_format_ids(ahead)} have a higher priority and start first)"
    if wait is not None:
        _set_waiting(job_id, wait)
        return Claim(job_id, ClaimOutcome.WAITING)
    with session_scope() as session:
        now = utcnow()
        where = f"GPUs [{_format_ids(gpu_ids)}]" if gpu_ids else "CPU"
        if not move(
            session,
            job_id,
            JobStatus.QUEUED,
            JobStatus.STARTING,
            message=f"claimed by worker {worker_id()} on {where}",
            attempt=Job.attempt + 1,
            host=host,
            worker_id=worker_id(),
            gpu_ids=gpu_ids,
            started_at=now,
            heartbeat_at=now,
            running_at=None,
        ):
            return Claim(job_id, ClaimOutcome.NOT_QUEUED)
        session.add_all(GpuLease(host=host, gpu_index=gpu, job_id=job_id) for gpu in gpu_ids)
        session.flush()
        attempt = session.execute(select(Job.attempt).where(Job.id == job_id)).scalar_one()
    return Claim(job_id, ClaimOutcome.CLAIMED, attempt=attempt, gpu_ids=gpu_ids)


def release_leases(session: Session, job_id: int, host: str) -> None:
    session.execute(delete(GpuLease).where(GpuLease.job_id == job_id, GpuLease.host == host))


def ring_waiting_jobs() -> list[int]:
    """Re-send the doorbell for jobs waiting for GPUs, highest priority first, now that some may be free."""
    with session_scope() as session:
        ids = list(
            session.scalars(
                select(Job.id)
                .where(Job.status == JobStatus.QUEUED, Job.status_reason == WAITING_FOR_GPUS)
                .order_by(Job.priority.desc(), Job.id)
            )
        )
    for job_id in ids:
        enqueue_job(job_id)
    return ids

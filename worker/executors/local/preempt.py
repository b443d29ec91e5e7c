"""Priority preemption: which running jobs of lower priority stop so that a queued job fits, and asking them.

The choice is plain functions over plain data, as worker/executors/local/host_choice.py's, and the same for
what a job takes of a host, GPUs or CPU cores; `preempt_for` reads the jobs holding them and moves the chosen
ones running -> preempting, each a compare-and-set. Their supervisors see that, stop them (SIGTERM: a final
checkpoint at the next report step) and requeue them; the queued job's claim then finds their GPUs or cores
free, and START_ORDER with _reserved_ahead (worker/executors/local/leases.py) keeps any lower priority from
taking them first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import combinations

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.config import get_settings
from core.models import Job, as_utc, utcnow
from core.states import JobStatus
from core.transitions import move
from jobspec.plan import Plan
from jobspec.spec import JobSpec
from worker.executors.local.host_choice import (
    HostView,
    candidates,
    infeasibility,
    jobs_text,
    pick_gpus,
    wait_for_cores,
    wants_gpus,
)

PREEMPTED_REASON = "preempted"


class PreemptRaced(Exception):
    """A chosen victim moved on (ended, cancelled, preempted by another claim) before this claim stopped it:
    the claim rolls back and looks again."""


@dataclass(frozen=True)
class Holder:
    """A job holding GPUs or CPU cores, as preemption sees it."""

    job_id: int
    priority: int
    started_at: datetime  # of its current attempt
    preemptible: bool = True  # spec.limits.preemptible
    stopping: bool = False  # preempting already: what it holds comes free without stopping anyone else


@dataclass(frozen=True)
class Choice:
    stop: list[int]  # the jobs to ask to stop now
    awaited: list[int]  # those whose GPUs the queued job waits for, the ones stopping already included


def eligible(holder: Holder, priority: int, not_before: datetime) -> bool:
    """A victim for a job of `priority`: strictly lower, preemptible, and running since `not_before` (the
    minimum runtime) in this attempt, so a job preempted once makes progress before it can be again."""
    return holder.priority < priority and holder.preemptible and holder.started_at <= not_before


def _without(host: HostView, jobs: set[int]) -> HostView:
    return replace(
        host,
        held={gpu: job for gpu, job in host.held.items() if job not in jobs},
        cpu_held={job: cores for job, cores in host.cpu_held.items() if job not in jobs},
    )


def _fits(plan: Plan, host: HostView) -> bool:
    return pick_gpus(plan, host)[1] is None and wait_for_cores(plan, host) is None


def _cost(stop: tuple[Holder, ...]) -> tuple[int, tuple[int, ...], tuple[float, ...]]:
    """Fewest first, then the lowest priorities, then the most recently started (the least work lost)."""
    return (
        len(stop),
        tuple(sorted((holder.priority for holder in stop), reverse=True)),
        tuple(sorted(-holder.started_at.timestamp() for holder in stop)),
    )


def _worth_trying(plan: Plan, host: HostView, able: list[Holder]) -> list[Holder]:
    """The holders on this host that could be in the cheapest set of victims: those holding what the job
    needs (GPUs, or cores for a CPU job), and of those holding the same GPUs or number of cores at one
    priority only the most recently started, as many as the job takes GPUs or cores: no set needs more
    victims than that, and a more recent one loses less work. A host has a handful of GPUs, and this keeps
    a host of many one-core jobs from making every set of them a candidate."""
    groups: dict[tuple[tuple[int, ...], int, int], list[Holder]] = {}
    for holder in sorted(able, key=lambda holder: holder.started_at, reverse=True):
        gpus = tuple(sorted(gpu for gpu, job in host.held.items() if job == holder.job_id))
        cores = host.cpu_held.get(holder.job_id, 0)
        if gpus if wants_gpus(plan) else cores:
            groups.setdefault((gpus, cores, holder.priority), []).append(holder)
    most = max(plan.num_gpus, len(plan.gpus or []), plan.cpu_cores)
    return [holder for group in groups.values() for holder in group[:most]]


def _cheapest(
    plan: Plan, host: HostView, stopping: set[int], able: list[Holder]
) -> tuple[Holder, ...] | None:
    """The cheapest victims on this host that make room for one node of `plan`; None when none do."""
    on_host = _worth_trying(plan, host, able)
    freed = _without(host, stopping)
    for count in range(len(on_host) + 1):
        room = [stop for stop in combinations(on_host, count) if _fits(plan, _without(freed, _ids(stop)))]
        if room:
            return min(room, key=_cost)
    return None


def _ids(holders: tuple[Holder, ...]) -> set[int]:
    return {holder.job_id for holder in holders}


def choose_victims(
    plan: Plan, priority: int, hosts: list[HostView], holders: list[Holder], not_before: datetime
) -> Choice | None:
    """The victims that let a job of `priority` run `plan` once they stop, on one host per node; None when
    stopping every eligible job would still leave it waiting, so nothing is stopped for a job that could not
    run anyway."""
    stopping = {holder.job_id for holder in holders if holder.stopping}
    able = [h for h in holders if not h.stopping and eligible(h, priority, not_before)]
    options = []
    for host in candidates(plan, hosts):
        if not host.live or infeasibility(plan, host) is not None:
            continue
        stop = _cheapest(plan, host, stopping, able)
        if stop is not None:
            options.append((_cost(stop), host.name, stop, host))
    if len(options) < plan.nnodes:
        return None
    chosen = sorted(options)[: plan.nnodes]
    stop_ids = sorted({job for _, _, stop, _ in chosen for job in _ids(stop)})
    waited = {job for *_, host in chosen for job in host.takers if job in stopping}
    return Choice(stop=stop_ids, awaited=sorted(waited | set(stop_ids)))


def _holders(session: Session, hosts: list[HostView]) -> list[Holder]:
    holding = {job for host in hosts for job in host.takers}
    rows = session.execute(
        select(Job.id, Job.priority, Job.started_at, Job.spec, Job.status).where(
            Job.id.in_(holding), Job.status.in_([JobStatus.RUNNING, JobStatus.PREEMPTING])
        )
    )
    return [
        Holder(
            job_id=job_id,
            priority=priority,
            started_at=as_utc(started_at or utcnow()),
            preemptible=JobSpec.model_validate(spec).limits.preemptible,
            stopping=status == JobStatus.PREEMPTING,
        )
        for job_id, priority, started_at, spec, status in rows
    ]


def _after_min_runtime(
    plan: Plan, priority: int, hosts: list[HostView], holders: list[Holder], now: datetime
) -> str:
    """'; job 27 (priority 0) can be preempted for it from 12:04:10 UTC, once it has run
    TRAINYARD_PREEMPT_MIN_RUNTIME_S', when only that minimum keeps the job from preempting; '' otherwise."""
    later = choose_victims(plan, priority, hosts, holders, not_before=now)
    if later is None or not later.stop:
        return ""
    minimum = timedelta(seconds=get_settings().preempt_min_runtime_s)
    started = {holder.job_id: holder for holder in holders}
    at = max(started[job].started_at for job in later.stop) + minimum
    jobs = ", ".join(f"{job} (priority {started[job].priority})" for job in later.stop)
    return (
        f"; job{'s' if len(later.stop) > 1 else ''} {jobs} can be preempted for it from {at:%H:%M:%S} UTC, "
        f"once {'it has' if len(later.stop) == 1 else 'they have'} run TRAINYARD_PREEMPT_MIN_RUNTIME_S "
        f"({minimum.total_seconds():g} s)"
    )


def preempt_for(session: Session, job: Job, plan: Plan, hosts: list[HostView], wait: str) -> str:
    """Ask the chosen victims to stop so that `job` fits on `hosts` (with what is reserved for queued jobs
    ahead of it marked held); why the job waits meanwhile: `wait`, placement's reason, when no one is
    stopped, with when someone can be if only the minimum runtime protects them. Raises PreemptRaced when a
    victim moved on first."""
    now, holders = utcnow(), _holders(session, hosts)
    not_before = now - timedelta(seconds=get_settings().preempt_min_runtime_s)
    choice = choose_victims(plan, job.priority, hosts, holders, not_before)
    if choice is None:
        return wait + _after_min_runtime(plan, job.priority, hosts, holders, now)
    if not choice.awaited:
        return wait
    what = "GPUs" if wants_gpus(plan) else "CPU cores"
    took = f"preempted by job {job.id} (priority {job.priority}), which takes its {what}"
    why = f"{took}; stopping at its next report step, after a checkpoint, to resume from it later"
    for victim in choice.stop:
        if not move(
            session, victim, JobStatus.RUNNING, JobStatus.PREEMPTING, reason=PREEMPTED_REASON, message=why
        ):
            raise PreemptRaced(victim)
    awaited = jobs_text(choice.awaited)
    return f"waiting for {awaited} to stop: preempted for this job (priority {job.priority})"

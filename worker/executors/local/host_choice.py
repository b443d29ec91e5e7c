"""Where a job runs: a host and its GPUs for each of the job's nodes, chosen over every registered host.

Plain functions over plain data; worker/executors/local/leases.py reads the hosts from SQL and leases the
choice in one transaction. A multi-node job gets all of its hosts at once or none: no host holds GPUs while it
waits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from core.hosts import cores_text
from jobspec.plan import Plan


@dataclass(frozen=True)
class HostView:
    name: str
    address: str
    gpu_ids: list[int]
    live: bool  # its worker heartbeats
    held: dict[int, int] = field(default_factory=dict)  # GPU -> the job holding or reserving it
    active_jobs: int = 0
    cpus: int | None = None  # the processes its CPU jobs may run (cores x overcommit); None: not counted
    cpu_held: dict[int, int] = field(default_factory=dict)  # CPU job -> the processes it runs here
    # GPU -> why no job (or, for a job's device errors there, this job) may take it now: "drained (...)"
    off: dict[int, str] = field(default_factory=dict)

    @property
    def usable(self) -> list[int]:
        """Its GPUs neither held nor off, in order."""
        return [gpu for gpu in sorted(self.gpu_ids) if gpu not in self.held and gpu not in self.off]

    @property
    def free(self) -> int:
        return len(self.usable)

    @property
    def takers(self) -> set[int]:
        """The jobs holding or reserving its GPUs or cores."""
        return {*self.held.values(), *self.cpu_held}

    @property
    def free_cores(self) -> int:
        """Cores no CPU job holds or has reserved; 0 where cores are not counted."""
        return 0 if self.cpus is None else max(self.cpus - sum(self.cpu_held.values()), 0)


def wants_gpus(plan: Plan) -> bool:
    return bool(plan.gpus or plan.num_gpus)


@dataclass(frozen=True)
class NodeChoice:
    node_rank: int
    host: str
    address: str
    gpu_ids: list[int]


def _format_ids(ids: Iterable[int]) -> str:
    return ", ".join(str(i) for i in ids) or "none"


def jobs_text(jobs: list[int]) -> str:
    """'job 7', 'jobs 7, 9'."""
    return ("job " if len(jobs) == 1 else "jobs ") + _format_ids(jobs)


def infeasibility(plan: Plan, host: HostView) -> str | None:
    """Why this host can never run one node of the plan, or None when it could once its GPUs (or cores) are
    free."""
    have = f"host {host.name} has GPUs [{_format_ids(host.gpu_ids)}]"
    if plan.gpus is not None:
        missing = sorted(set(plan.gpus) - set(host.gpu_ids))
        if missing:
            return f"asked for GPUs [{_format_ids(plan.gpus)}] but {have} (no GPU {_format_ids(missing)})"
    elif plan.num_gpus > len(host.gpu_ids):
        return f"asked for {plan.num_gpus} GPUs but {have}"
    if host.cpus is not None and plan.cpu_cores > host.cpus:
        return (
            f"asked for {cores_text(plan.cpu_cores)} (parallel.nproc_per_node) but host {host.name} runs "
            f"CPU jobs on {cores_text(host.cpus)} (TRAINYARD_CPU_OVERCOMMIT raises that)"
        )
    return None


def wait_for_cores(plan: Plan, host: HostView) -> str | None:
    """Why a CPU job waits for this host's cores ("waiting for 2 CPU cores on vm; job 21 holds 2 of 2"), or
    None when they are free."""
    used = sum(host.cpu_held.values())
    if host.cpus is None or used + plan.cpu_cores <= host.cpus:
        return None
    holders = sorted(host.cpu_held)
    who = f"{jobs_text(holders)} {'holds' if len(holders) == 1 else 'hold'}"
    return f"waiting for {cores_text(plan.cpu_cores)} on {host.name}; {who} {used} of {host.cpus}"


def _off_text(host: HostView, gpus: Iterable[int]) -> list[str]:
    return [f"GPU {gpu}, {host.off[gpu]}" for gpu in sorted(gpus) if gpu in host.off]


def pick_gpus(plan: Plan, host: HostView) -> tuple[list[int], str | None]:
    """The GPUs of one node on this host, given those held and those off, or ([], the reason to wait)."""
    held = host.held
    if plan.gpus is not None:
        busy = [f"GPU {gpu}, held by job {held[gpu]}" for gpu in plan.gpus if gpu in held]
        busy += _off_text(host, (gpu for gpu in plan.gpus if gpu not in held))
        if busy:
            return [], "waiting for " + ", ".join(busy)
        return sorted(plan.gpus), None
    free = host.usable
    if len(free) < plan.num_gpus:
        holders = ", ".join(f"GPU {gpu} by job {job}" for gpu, job in sorted(held.items()))
        off = "".join(f"; {text}" for text in _off_text(host, host.off))
        return [], f"waiting for {plan.num_gpus} free GPUs, {len(free)} free; held: {holders or 'none'}{off}"
    return free[: plan.num_gpus], None


def candidates(plan: Plan, hosts: list[HostView]) -> list[HostView]:
    return [host for host in hosts if plan.host is None or host.name == plan.host]


def never_fits(plan: Plan, hosts: list[HostView]) -> str | None:
    """Why no set of the known hosts, up or down, can ever run the plan; None when some can."""
    if plan.host is not None and not candidates(plan, hosts):
        known = ", ".join(sorted(host.name for host in hosts)) or "none"
        return f"parallel.host={plan.host} is not a host any worker registered (hosts: {known})"
    reasons = [infeasibility(plan, host) for host in candidates(plan, hosts)]
    able = sum(reason is None for reason in reasons)
    if able >= plan.nnodes:
        return None
    why = "; ".join(reason for reason in reasons if reason)
    if plan.nnodes == 1:
        return why
    return f"parallel.nnodes={plan.nnodes} needs that many hosts able to run a node, and {able} can ({why})"


def choose_nodes(plan: Plan, hosts: list[HostView]) -> tuple[list[NodeChoice], str | None]:
    """A live host for each node, distinct hosts, or ([], why the job waits).

    The hosts with the most free GPUs (for a GPU job) and then the fewest jobs go first, so jobs spread."""
    fits: list[tuple[HostView, list[int]]] = []
    waits: list[str] = []
    for host in candidates(plan, hosts):
        if infeasibility(plan, host) is not None:
            continue
        if not host.live:
            waits.append(f"host {host.name} is down")
            continue
        gpus, wait = pick_gpus(plan, host)
        wait = wait or wait_for_cores(plan, host)
        if wait is None:
            fits.append((host, gpus))
        else:
            waits.append(wait if len(hosts) == 1 else f"host {host.name}: {wait}")
    if len(fits) < plan.nnodes:
        if plan.nnodes > 1:
            waits.insert(0, f"waiting for {plan.nnodes} hosts with room, {len(fits)} have it")
        return [], "; ".join(waits) or "waiting for a worker to register its host"
    fits.sort(key=lambda fit: (-fit[0].free if wants_gpus(plan) else 0, fit[0].active_jobs, fit[0].name))
    nodes = [
        NodeChoice(rank, host.name, host.address, gpus)
        for rank, (host, gpus) in enumerate(fits[: plan.nnodes])
    ]
    return nodes, None


def _reserving(host: HostView, job_id: int, gpus: list[int], cores: int) -> HostView:
    return replace(
        host,
        held={**host.held, **{gpu: job_id for gpu in gpus}},
        cpu_held={**host.cpu_held, job_id: cores} if cores else host.cpu_held,
    )


def reserve(hosts: list[HostView], job_id: int, plan: Plan) -> list[HostView]:
    """The hosts with what `job_id` takes marked as held by it: where it would start now, or, while it waits,
    what it needs of what is free on the live host that can run it with most free (GPUs, or cores for a CPU
    job), so that no job after it takes them: the rest is held by running jobs or by jobs ahead of it, so
    nothing that starts after it can delay it."""
    if never_fits(plan, hosts) is not None:
        return hosts
    nodes, _ = choose_nodes(plan, hosts)
    if nodes:
        wanted = {node.host: (node.gpu_ids, plan.cpu_cores) for node in nodes}
    else:
        able = [h for h in candidates(plan, hosts) if h.live and infeasibility(plan, h) is None]
        if not able:
            return hosts
        best = max(able, key=lambda host: (host.free if wants_gpus(plan) else host.free_cores, host.name))
        free = best.usable
        gpus = [gpu for gpu in (plan.gpus or free[: plan.num_gpus]) if gpu in free]
        wanted = {best.name: (gpus, min(plan.cpu_cores, best.free_cores))}
    return [_reserving(host, job_id, *wanted[host.name]) if host.name in wanted else host for host in hosts]

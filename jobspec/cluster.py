"""The registered cluster as the planner sees it, and what a spec asks of it that no host has.

The API reads the inventory from the hosts' heartbeats (app/services/gpus.py); the planner judges a spec
against it here. No torch import.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from jobspec.problems import Problem
from jobspec.spec import ParallelSpec


@dataclass(frozen=True)
class Inventory:
    """GPU ids per registered host. Empty while no worker has registered: the worker that places the job
    then fails it as infeasible if it cannot fit."""

    hosts: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


def _has(ids: tuple[int, ...]) -> str:
    return "has GPUs " + ", ".join(map(str, ids)) if ids else "has no GPUs"


def _host_problems(parallel: ParallelSpec, hosts: Mapping[str, tuple[int, ...]]) -> Iterator[Problem]:
    names = ", ".join(sorted(hosts))
    if parallel.host is not None and parallel.host not in hosts:
        yield Problem(
            "parallel.host",
            f"no worker registered host {parallel.host}; hosts: {names}",
            "pin one of those or leave parallel.host out",
        )
    if parallel.nnodes > len(hosts):
        yield Problem(
            "parallel.nnodes",
            f"{parallel.nnodes} hosts asked for but {len(hosts)} are registered ({names})",
            f"ask for at most {len(hosts)}",
        )


def _listed_gpu_problem(gpus: list[int], hosts: Mapping[str, tuple[int, ...]]) -> Problem | None:
    wanted = set(gpus)
    if any(wanted <= set(ids) for ids in hosts.values()):
        return None
    if len(hosts) == 1:
        [ids] = hosts.values()
        missing = min(wanted - set(ids))
        fix = "ask for GPUs it has" if ids else "leave parallel.gpus out to train on CPU"
        return Problem("parallel.gpus", f"GPU {missing} does not exist on this host (it {_has(ids)})", fix)
    have = "; ".join(f"{host} {_has(ids)}" for host, ids in sorted(hosts.items()))
    listed = ", ".join(map(str, gpus))
    return Problem("parallel.gpus", f"no single host has GPUs {listed} ({have})", "ask for GPUs one host has")


def _counted_gpu_problem(num_gpus: int, hosts: Mapping[str, tuple[int, ...]]) -> Problem | None:
    most = max(len(ids) for ids in hosts.values())
    if num_gpus <= most:
        return None
    fix = f"ask for at most {most}" if most else "leave parallel.num_gpus out to train on CPU"
    return Problem("parallel.num_gpus", f"{num_gpus} GPUs asked for but the largest host has {most}", fix)


def cluster_problems(parallel: ParallelSpec, inventory: Inventory) -> Iterator[Problem]:
    """Hosts and GPUs no registered host has; GPUs are judged on the pinned host alone, when one is."""
    hosts = inventory.hosts
    if not hosts:
        return
    yield from _host_problems(parallel, hosts)
    if parallel.host is not None:
        if parallel.host not in hosts:
            return
        hosts = {parallel.host: hosts[parallel.host]}
    if parallel.gpus:
        problem = _listed_gpu_problem(parallel.gpus, hosts)
    else:
        problem = _counted_gpu_problem(parallel.num_gpus or 0, hosts)
    if problem is not None:
        yield problem

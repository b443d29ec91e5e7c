"""Choosing preemption victims: plain functions over plain data, as placement's tests."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from jobspec.plan import Plan, resolve_plan
from jobspec.spec import JobSpec
from worker.executors.local.host_choice import HostView
from worker.executors.local.preempt import Choice, Holder, choose_victims

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)
LONG_AGO = NOW - timedelta(hours=1)


def plan(**parallel: object) -> Plan:
    spec = {
        "model": {"arch": "mlp"},
        "data": {"dataset": "synthetic"},
        "train": {"batch_size": 60},  # divides over 1 to 6 ranks
        "parallel": parallel,
    }
    return resolve_plan(JobSpec.model_validate(spec))


def host(held: dict[int, int], name: str = "a", gpus: int = 4, live: bool = True) -> HostView:
    return HostView(name, "10.0.0.1", list(range(gpus)), live, held=held)


def holder(job_id: int, priority: int = 0, minutes_ago: int = 60, **fields: bool) -> Holder:
    return Holder(job_id, priority, NOW - timedelta(minutes=minutes_ago), **fields)


def choose(wanted: Plan, hosts: list[HostView], holders: list[Holder], priority: int = 10) -> Choice | None:
    return choose_victims(wanted, priority, hosts, holders, not_before=NOW - timedelta(minutes=10))


def test_fewest_victims_first() -> None:
    # Job 1 holds two GPUs, jobs 2 and 3 one each: one victim (job 1) frees two.
    hosts = [host({0: 1, 1: 1, 2: 2, 3: 3})]
    chosen = choose(plan(num_gpus=2), hosts, [holder(1, priority=5), holder(2), holder(3)])
    assert chosen == Choice(stop=[1], awaited=[1])


def test_lowest_priority_then_most_recently_started() -> None:
    hosts = [host({0: 1, 1: 2, 2: 3, 3: 4})]
    holders = [
        holder(1, priority=1),
        holder(2, minutes_ago=30),
        holder(3, minutes_ago=20),
        holder(4, priority=1),
    ]
    assert choose(plan(num_gpus=1), hosts, holders) == Choice(stop=[3], awaited=[3])


def test_only_strictly_lower_priorities_are_victims() -> None:
    hosts = [host({0: 1, 1: 2, 2: 3, 3: 4})]
    holders = [holder(job, priority=10) for job in (1, 2, 3, 4)]
    assert choose(plan(num_gpus=1), hosts, holders) is None


def test_guards_non_preemptible_and_minimum_runtime() -> None:
    hosts = [host({0: 1, 1: 2})]
    holders = [holder(1, preemptible=False), holder(2, minutes_ago=5)]
    assert choose(plan(gpus=[0]), hosts, holders) is None, "job 1 is not preemptible"
    assert choose(plan(gpus=[1]), hosts, holders) is None, "job 2 has not run its minimum runtime"
    assert choose(plan(num_gpus=1), [host({0: 1, 1: 2}, gpus=2)], holders) is None


def test_never_preempts_for_a_job_that_could_not_run_anyway() -> None:
    # Stopping both victims frees two GPUs, but the job wants three of a host that has two.
    assert choose(plan(num_gpus=3), [host({0: 1, 1: 2}, gpus=2)], [holder(1), holder(2)]) is None
    # GPU 3 is held by a job of higher priority: freeing GPU 2 alone does not let gpus=[2, 3] run.
    assert choose(plan(gpus=[2, 3]), [host({2: 1, 3: 2})], [holder(1), holder(2, priority=20)]) is None
    # A down host runs nothing.
    assert choose(plan(num_gpus=1), [host({0: 1}, gpus=1, live=False)], [holder(1)]) is None
    # A CPU job needs cores, not GPUs: stopping the job on the GPU frees none.
    assert choose(plan(nproc_per_node=1), [cpu_host({2: 2}, gpus=1, held={0: 1})], [holder(1)]) is None


def cpu_host(
    cpu_held: dict[int, int], cores: int = 2, gpus: int = 0, held: dict[int, int] | None = None
) -> HostView:
    return replace(host(held or {}, gpus=gpus), cpus=cores, cpu_held=cpu_held)


def test_cpu_jobs_are_victims_by_the_cores_they_hold() -> None:
    """Issue 33 #7: the same choice for cores as for GPUs. Job 1 holds one core, job 2 the other: a 2-core
    job stops both, a 1-core job the cheaper one."""
    hosts = [cpu_host({1: 1, 2: 1})]
    holders = [holder(1, priority=1), holder(2)]
    assert choose(plan(nproc_per_node=2, strategy="ddp"), hosts, holders) == Choice(
        stop=[1, 2], awaited=[1, 2]
    )
    assert choose(plan(nproc_per_node=1), hosts, holders) == Choice(stop=[2], awaited=[2])
    assert choose(plan(nproc_per_node=1), hosts, holders, priority=0) is None, "only lower priorities"


def test_many_one_core_jobs_are_chosen_among_quickly() -> None:
    """A host of 64 one-core jobs: the most recently started ones go, without trying every set of them."""
    hosts = [cpu_host({job: 1 for job in range(64)}, cores=64)]
    holders = [holder(job, minutes_ago=100 - job) for job in range(64)]
    wide = plan(nproc_per_node=6, strategy="ddp")
    assert choose(wide, hosts, holders) == Choice(stop=list(range(58, 64)), awaited=list(range(58, 64)))


def test_gpus_of_a_job_already_stopping_are_awaited_not_taken_again() -> None:
    hosts = [host({0: 1, 1: 2}, gpus=2)]
    holders = [holder(1, stopping=True), holder(2)]
    assert choose(plan(num_gpus=1), hosts, holders) == Choice(stop=[], awaited=[1])
    assert choose(plan(num_gpus=2), hosts, holders) == Choice(stop=[2], awaited=[1, 2])


def test_picks_the_host_with_the_cheapest_victims() -> None:
    hosts = [host({0: 1, 1: 2}, name="a", gpus=2), host({0: 3, 1: 3}, name="b", gpus=2)]
    holders = [holder(1), holder(2), holder(3)]
    assert choose(plan(num_gpus=2), hosts, holders) == Choice(stop=[3], awaited=[3])


def test_multi_node_needs_enough_hosts_with_room() -> None:
    hosts = [host({0: 1}, name="a", gpus=1), host({0: 2}, name="b", gpus=1), host({0: 3}, name="c", gpus=1)]
    holders = [holder(1), holder(2, priority=20), holder(3, minutes_ago=15)]
    assert choose(plan(num_gpus=1, nnodes=2), hosts, holders) == Choice(stop=[1, 3], awaited=[1, 3])
    assert choose(plan(num_gpus=1, nnodes=3), hosts, holders) is None

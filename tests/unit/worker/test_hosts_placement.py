"""Placement over several hosts: spreading, pinning, all-or-none multi-node leases, down hosts, and the reaper
requeueing a job whose node's host went quiet."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import select

from core.config import get_settings
from core.db import session_scope
from core.doorbell import host_queue
from core.models import GpuLease, Job, JobNode, Worker, utcnow
from core.states import JobStatus
from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec
from tests.unit.worker_fixtures import Doorbell, WorkerDb, claim_at_once
from worker.executors.local.leases import ClaimOutcome, claim_job
from worker.executors.local.reaper import Rings, reap
from worker.executors.local.runner import run_job

pytest_plugins = ["tests.unit.worker_fixtures"]

OTHER = "otherhost"


def add_host(name: str, gpus: list[int], *, seconds_ago: float = 0) -> None:
    with session_scope() as session:
        session.merge(
            Worker(
                id=f"{name}:1",
                host=name,
                address=f"10.0.0.{len(name)}",
                gpus=[
                    {"index": gpu, "name": "fake", "memory_total_mb": 1, "memory_used_mb": 0} for gpu in gpus
                ],
                heartbeat_at=utcnow() - timedelta(seconds=seconds_ago),
            )
        )


def nodes(job_id: int) -> list[tuple[int, str, list[int]]]:
    with session_scope() as session:
        rows = session.scalars(select(JobNode).where(JobNode.job_id == job_id).order_by(JobNode.node_rank))
        return [(row.node_rank, row.host, row.gpu_ids) for row in rows]


def leases() -> dict[tuple[str, int], int]:
    with session_scope() as session:
        return {(lease.host, lease.gpu_index): lease.job_id for lease in session.scalars(select(GpuLease))}


def test_one_host_jobs_spread_over_hosts(database: WorkerDb) -> None:
    add_host(OTHER, [0, 1, 2, 3])
    jobs = [database.add_job(database.spec(num_gpus=2)) for _ in range(4)]
    hosts = Counter(claim_job(job_id).nodes[0].host for job_id in jobs)
    assert hosts == {database.host: 2, OTHER: 2}
    late = database.add_job(database.spec(num_gpus=1))
    assert claim_job(late).outcome is ClaimOutcome.WAITING


def test_cpu_jobs_spread_by_active_jobs(database: WorkerDb) -> None:
    add_host(OTHER, [])
    first, second = (database.add_job(database.spec(nproc_per_node=1)) for _ in range(2))
    assert {claim_job(first).nodes[0].host, claim_job(second).nodes[0].host} == {database.host, OTHER}


def test_a_pinned_host_is_honoured_and_an_unknown_one_refused(database: WorkerDb) -> None:
    add_host(OTHER, [0, 1])
    pinned = database.add_job(database.spec(num_gpus=1, host=OTHER))
    assert claim_job(pinned).nodes[0].host == OTHER
    unknown = database.add_job(database.spec(num_gpus=1, host="nowhere"))
    assert claim_job(unknown).outcome is ClaimOutcome.INFEASIBLE
    assert "parallel.host=nowhere is not a host any worker registered" in (
        database.job(unknown).message or ""
    )


def test_a_job_pinned_to_a_down_host_waits_for_it(database: WorkerDb) -> None:
    add_host(OTHER, [0, 1], seconds_ago=get_settings().lease_timeout_s + 5)
    job_id = database.add_job(database.spec(num_gpus=1, host=OTHER))
    assert claim_job(job_id).outcome is ClaimOutcome.WAITING
    assert database.job(job_id).message == f"host {OTHER} is down"


def test_two_node_job_leases_both_hosts_at_once(database: WorkerDb) -> None:
    add_host(OTHER, [0, 1])
    job_id = database.add_job(database.spec(num_gpus=2, nnodes=2))
    claim = claim_job(job_id)
    assert claim.outcome is ClaimOutcome.CLAIMED
    assert sorted(node.host for node in claim.nodes) == sorted([database.host, OTHER])
    assert leases() == {(host, gpu): job_id for host in (database.host, OTHER) for gpu in (0, 1)}
    assert [rank for rank, _, _ in nodes(job_id)] == [0, 1]


def test_two_node_job_holds_nothing_while_one_host_is_full(database: WorkerDb) -> None:
    add_host(OTHER, [0, 1])
    blocker = database.add_job(database.spec(num_gpus=2, host=OTHER))
    claim_job(blocker)
    job_id = database.add_job(database.spec(num_gpus=2, nnodes=2))
    assert claim_job(job_id).outcome is ClaimOutcome.WAITING
    assert "waiting for 2 hosts with room, 1 have it" in (database.job(job_id).message or "")
    assert set(leases().values()) == {blocker}  # no host holds GPUs while it waits


def test_more_nodes_than_hosts_is_infeasible(database: WorkerDb) -> None:
    job_id = database.add_job(database.spec(num_gpus=1, nnodes=2))
    assert claim_job(job_id).outcome is ClaimOutcome.INFEASIBLE
    assert "parallel.nnodes=2 needs that many hosts" in (database.job(job_id).message or "")


def test_racing_two_host_claims_never_double_book(database: WorkerDb) -> None:
    """Eight 2-node jobs and eight 1-host jobs race for a 4-GPU and a 2-GPU host from threads: whatever wins,
    no GPU is leased twice, and every 2-node job holds a GPU on each host or nothing."""
    add_host(OTHER, [0, 1])
    specs = [database.spec(num_gpus=1, nnodes=2) if i % 2 else database.spec(num_gpus=1) for i in range(16)]
    jobs = [database.add_job(spec) for spec in specs]
    outcomes = claim_at_once(jobs)
    per_job = Counter(leases().values())  # keyed by (host, GPU): none is ever held twice
    assert per_job
    for job_id, spec in zip(jobs, specs, strict=True):
        wanted = spec["parallel"].get("nnodes", 1)
        assert per_job.get(job_id, 0) in (0, wanted)
        assert (outcomes[job_id] is ClaimOutcome.CLAIMED) == (job_id in per_job)
        if job_id in per_job:
            assert len({host for _, host, _ in nodes(job_id)}) == wanted  # a host per node
    assert set(outcomes.values()) <= {ClaimOutcome.CLAIMED, ClaimOutcome.WAITING}


def test_placement_rings_the_other_hosts_queue(database: WorkerDb, doorbell: Doorbell) -> None:
    add_host(OTHER, [0, 1, 2, 3, 4])  # more free GPUs: the one-host job goes there
    job_id = database.add_job(database.spec(num_gpus=1))
    run_job(job_id)
    assert doorbell.nodes == [(host_queue(OTHER), [job_id, 1, 0])]
    assert database.job(job_id).status == JobStatus.STARTING  # nothing started here


def test_a_quiet_node_requeues_the_whole_job(database: WorkerDb, doorbell: Doorbell) -> None:
    add_host(OTHER, [0, 1])
    job_id = database.add_job(database.spec(num_gpus=1, nnodes=2))
    claim_job(job_id)
    timeout = get_settings().lease_timeout_s
    now = utcnow() + timedelta(seconds=timeout + 1)
    with session_scope() as session:  # the job and node 0 heartbeat on; the other host went quiet
        session.get_one(Job, job_id).heartbeat_at = now
        for node in session.scalars(select(JobNode).where(JobNode.job_id == job_id)):
            if node.host == database.host:
                node.heartbeat_at = now

    report = reap(Rings(), now=now)

    assert report.requeued == [job_id]
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.QUEUED, "worker_lost")
    assert f"host {OTHER} stopped heartbeating" in (job.message or "")
    assert leases() == {}  # every host's GPUs, not only the quiet one's


@pytest.mark.parametrize(
    ("parallel", "refusal"),
    [
        (
            {"strategy": "pipeline", "nnodes": 2, "nproc_per_node": 2},
            "spans hosts with strategy ddp or fsdp only",
        ),
        ({"strategy": "ddp", "nnodes": 2, "host": "box"}, "parallel.host pins a one-host job"),
    ],
)
def test_what_cannot_span_hosts_is_refused(parallel: dict[str, object], refusal: str) -> None:
    spec = {"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}, "parallel": parallel}
    with pytest.raises(ValueError, match=refusal):
        resolve_plan(JobSpec.model_validate(spec))

"""CPU accounting: a CPU job takes parallel.nproc_per_node cores of its host, which runs CPU jobs only up to
the cores its worker reports (times TRAINYARD_CPU_OVERCOMMIT), and the queue says what a job waits for."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from app.services.queue import list_queue
from core.config import get_settings
from core.db import session_scope
from core.models import Job, Worker, utcnow
from core.states import JobStatus
from tests.unit.worker_fixtures import WorkerDb
from worker.executors.local.leases import WAITING_FOR_CORES, ClaimOutcome, claim_job, claim_next

pytest_plugins = ["tests.unit.worker_fixtures"]


def report_cores(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    """This host's worker reports `cores`, whatever the machine running the test has."""
    monkeypatch.setenv("TRAINYARD_CPU_OVERCOMMIT", "1.0")
    get_settings.cache_clear()
    with session_scope() as session:
        session.execute(update(Worker).values(cpus=cores))


@pytest.fixture
def two_cores(database: WorkerDb, monkeypatch: pytest.MonkeyPatch) -> WorkerDb:
    report_cores(monkeypatch, 2)
    return database


def cpu_job(database: WorkerDb, cores: int) -> int:
    return database.add_job(database.spec(nproc_per_node=cores))


def test_the_third_one_core_job_waits_for_a_core(two_cores: WorkerDb) -> None:
    first, second, third = (cpu_job(two_cores, 1) for _ in range(3))
    assert [claim_job(job).outcome for job in (first, second, third)] == [
        ClaimOutcome.CLAIMED,
        ClaimOutcome.CLAIMED,
        ClaimOutcome.WAITING,
    ]
    waiting = two_cores.job(third)
    expected = f"waiting for 1 CPU core on {two_cores.host}; jobs {first}, {second} hold 2 of 2"
    assert (waiting.status_reason, waiting.message) == (WAITING_FOR_CORES, expected)
    with session_scope() as session:
        (entry,) = list_queue(session).data
    assert (entry.job_id, entry.reason) == (third, expected)


def test_one_job_holding_every_core(two_cores: WorkerDb) -> None:
    holder, waiter = cpu_job(two_cores, 2), cpu_job(two_cores, 2)
    assert claim_job(holder).outcome is ClaimOutcome.CLAIMED
    assert claim_job(waiter).outcome is ClaimOutcome.WAITING
    assert (
        two_cores.job(waiter).message
        == f"waiting for 2 CPU cores on {two_cores.host}; job {holder} holds 2 of 2"
    )


def test_more_cores_than_the_host_has_never_fits(two_cores: WorkerDb) -> None:
    job = two_cores.add_job({**two_cores.spec(nproc_per_node=3), "train": {"batch_size": 63}})
    assert claim_job(job).outcome is ClaimOutcome.INFEASIBLE
    assert "TRAINYARD_CPU_OVERCOMMIT" in (two_cores.job(job).message or "")


def test_overcommit_lets_more_run(two_cores: WorkerDb, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_CPU_OVERCOMMIT", "2")
    get_settings.cache_clear()
    jobs = [cpu_job(two_cores, 1) for _ in range(5)]
    outcomes = [claim_job(job).outcome for job in jobs]
    assert outcomes == [ClaimOutcome.CLAIMED] * 4 + [ClaimOutcome.WAITING]
    assert two_cores.job(jobs[-1]).status == JobStatus.QUEUED


def test_gpu_jobs_take_no_cores(two_cores: WorkerDb) -> None:
    cpu = [cpu_job(two_cores, 1) for _ in range(2)]
    gpu = two_cores.add_job(two_cores.spec(num_gpus=1))
    assert [claim_job(job).outcome for job in [*cpu, gpu]] == [ClaimOutcome.CLAIMED] * 3


def finish(job_id: int) -> None:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.SUCCEEDED))


def test_a_wide_job_is_not_overtaken_by_later_narrow_ones(two_cores: WorkerDb) -> None:
    """Issue 33 #6: the first waiting job keeps the core that is free for itself, so the 1-core jobs after
    it do not take it, and each core that frees, in turn, while it waits for two."""
    holder = cpu_job(two_cores, 1)
    assert claim_job(holder).outcome is ClaimOutcome.CLAIMED
    wide, narrow = cpu_job(two_cores, 2), cpu_job(two_cores, 1)
    assert claim_next() is None
    assert (
        two_cores.job(wide).message
        == f"waiting for 2 CPU cores on {two_cores.host}; job {holder} holds 1 of 2"
    )
    assert two_cores.job(narrow).message == (
        f"waiting for 1 CPU core on {two_cores.host}; jobs {holder}, {wide} hold 2 of 2 "
        f"(kept for queued job {wide}, which starts first)"
    )
    finish(holder)
    claim = claim_next()
    assert claim is not None and claim.job_id == wide
    assert two_cores.job(narrow).status == JobStatus.QUEUED


def test_a_narrow_job_backfills_where_it_cannot_delay_the_wide_one(two_cores: WorkerDb) -> None:
    """Another host with one core can never run the 2-core job, so a 1-core job after it starts there; the
    next one still leaves the wide job's core alone."""
    with session_scope() as session:
        session.add(
            Worker(id="small:1", host="small", address="10.0.0.9", gpus=[], cpus=1, heartbeat_at=utcnow())
        )
    holder = two_cores.add_job(two_cores.spec(nproc_per_node=1, host=two_cores.host))
    assert claim_job(holder).outcome is ClaimOutcome.CLAIMED
    wide, narrow, another = cpu_job(two_cores, 2), cpu_job(two_cores, 1), cpu_job(two_cores, 1)
    assert claim_job(wide).outcome is ClaimOutcome.WAITING
    claim = claim_job(narrow)
    assert (claim.outcome, claim.nodes[0].host) == (ClaimOutcome.CLAIMED, "small")
    assert claim_job(another).outcome is ClaimOutcome.WAITING


def test_hogwild_takes_a_core_per_worker(two_cores: WorkerDb) -> None:
    """Issue 33 #6: hogwild's one rank starts a process per worker, each training on a core."""
    hogwild = two_cores.add_job(two_cores.spec(strategy="hogwild", nproc_per_node=2))
    assert claim_job(hogwild).outcome is ClaimOutcome.CLAIMED
    later = cpu_job(two_cores, 1)
    assert claim_job(later).outcome is ClaimOutcome.WAITING
    assert (
        two_cores.job(later).message
        == f"waiting for 1 CPU core on {two_cores.host}; job {hogwild} holds 2 of 2"
    )

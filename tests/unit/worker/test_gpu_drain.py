"""A drained GPU through the claim path and the supervisor, with the fake trainer: its running job stops at a
checkpoint and resumes on another GPU, nothing new is placed on it until it is undrained; and a job that fails
twice on one GPU with device errors degrades it and runs its next attempt elsewhere."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import select

from core.config import get_settings
from core.db import session_scope
from core.gpu_health import GPU_DRAINED, Faults, GpuState, HealthSource, drain, record_faults, undrain
from core.models import GpuHealth
from core.states import JobStatus
from tests.unit.worker.test_kill import run_in_thread
from tests.unit.worker.test_preemption import events, resumed_from, wait_for_checkpoint
from tests.unit.worker_fixtures import Doorbell, WorkerDb
from worker.executors.local.leases import ClaimOutcome, claim_job
from worker.failure import FailureKind

pytest_plugins = ["tests.unit.worker_fixtures"]


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_PREEMPT_GRACE_S", "1")
    get_settings.cache_clear()


def health() -> dict[int, tuple[str, str, str]]:
    with session_scope() as session:
        rows = session.scalars(select(GpuHealth).where(GpuHealth.host == WorkerDb.host))
        return {row.gpu_index: (row.state, row.source, row.reason) for row in rows}


def test_a_drained_gpus_job_resumes_elsewhere_and_nothing_new_is_placed_there_until_undrained(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None], short_grace: None
) -> None:
    fake_trainer("stop_on_term,ok")
    job_id = database.add_job(database.spec(num_gpus=1))
    thread = run_in_thread(job_id)
    wait_for_checkpoint(database, job_id)
    (gpu,) = database.job(job_id).gpu_ids or []
    with session_scope() as session:
        assert drain(session, WorkerDb.host, gpu, "fans failing") == [job_id]
    thread.join(timeout=60)  # it stops at a checkpoint; the same thread runs the queue: the job again
    assert not thread.is_alive()
    job = database.job(job_id)
    assert (job.status, job.attempt) == (JobStatus.SUCCEEDED, 2), job.message
    assert gpu not in (job.gpu_ids or []), "its second attempt was placed on the drained GPU"
    assert (resumed_from(database, job_id) or "").endswith("checkpoints/step-10.pt")
    stopped = [event for event in events(job_id) if event[2] == GPU_DRAINED]
    assert [event[:2] for event in stopped] == [
        (JobStatus.RUNNING, JobStatus.PREEMPTING),
        (JobStatus.PREEMPTING, JobStatus.QUEUED),
    ]
    assert f"GPU {gpu} of {WorkerDb.host} was drained (fans failing)" in (stopped[0][3] or "")

    pinned = database.add_job(database.spec(gpus=[gpu]))
    assert claim_job(pinned).outcome is ClaimOutcome.WAITING
    assert database.job(pinned).message == f"waiting for GPU {gpu}, drained (fans failing)"
    with session_scope() as session:
        assert undrain(session, WorkerDb.host, gpu)
    assert claim_job(pinned).outcome is ClaimOutcome.CLAIMED


def test_every_gpu_but_a_drained_one_takes_jobs(database: WorkerDb, doorbell: Doorbell) -> None:
    with session_scope() as session:
        drain(session, WorkerDb.host, 0, "by hand")
    two = database.add_job(database.spec(num_gpus=2))
    assert claim_job(two).outcome is ClaimOutcome.CLAIMED
    assert database.job(two).gpu_ids == [1, 2]
    every = database.add_job(database.spec(num_gpus=4))
    assert claim_job(every).outcome is ClaimOutcome.WAITING
    assert database.job(every).message == (
        f"waiting for 4 free GPUs, 1 free; held: GPU 1 by job {two}, GPU 2 by job {two}; "
        "GPU 0, drained (by hand)"
    )


def test_two_device_errors_on_one_gpu_degrade_it_and_the_next_attempt_runs_elsewhere(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("device_error,device_error,ok")
    spec = database.spec(num_gpus=1)
    job_id = database.add_job({**spec, "limits": {"max_restarts": 2}})
    thread = run_in_thread(job_id)
    thread.join(timeout=60)
    assert not thread.is_alive()
    job = database.job(job_id)
    assert (job.status, job.attempt) == (JobStatus.SUCCEEDED, 3)
    assert job.gpu_ids == [1], "the third attempt ran on the GPU it failed on twice"
    restarts = [event for event in events(job_id) if event[0] == JobStatus.RESTARTING]
    assert [event[1] for event in restarts] == [JobStatus.STARTING, JobStatus.QUEUED]
    assert "GPU 0 failed it twice with device errors; requeued to resume on other GPUs" in (
        restarts[1][3] or ""
    )
    ended = [event for event in events(job_id) if event[1] == JobStatus.RESTARTING]
    assert {event[2] for event in ended} == {FailureKind.DEVICE}
    assert health() == {
        0: (GpuState.DEGRADED, HealthSource.JOBS, f"job {job_id} failed on it 2 times with device errors")
    }
    # Degraded, not drained: another job is placed there as before.
    other = database.add_job(database.spec(gpus=[0]))
    assert claim_job(other).outcome is ClaimOutcome.CLAIMED


def test_nvml_faults_drain_for_good_and_slowdowns_degrade_while_they_last(database: WorkerDb) -> None:
    hot = Faults(slow=("it slowed itself down for heat (HW thermal slowdown)",))
    lost = Faults(critical=("it fell off the bus (Xid 79)",))
    with session_scope() as session:
        record_faults(session, WorkerDb.host, {0: hot, 1: lost, 2: Faults()})
    assert health() == {
        0: (GpuState.DEGRADED, HealthSource.NVML, hot.slow[0]),
        1: (GpuState.DRAINED, HealthSource.NVML, lost.critical[0]),
    }
    with session_scope() as session:  # the next beat: the heat is gone; the Xid is not said again
        record_faults(session, WorkerDb.host, {0: Faults(), 1: Faults()})
    assert health() == {1: (GpuState.DRAINED, HealthSource.NVML, lost.critical[0])}
    with session_scope() as session:  # an admin's drain is not undone by a clean read, nor by a slowdown
        drain(session, WorkerDb.host, 2, "reseating it")
        record_faults(session, WorkerDb.host, {2: hot})
        record_faults(session, WorkerDb.host, {2: Faults()})
    assert health()[2] == (GpuState.DRAINED, HealthSource.ADMIN, "reseating it")

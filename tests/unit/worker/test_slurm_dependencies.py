"""Under Slurm a job waiting for its depends_on is handed over as soon as every job it waits for is a live
Slurm job, with --dependency=afterok naming them (tests/integration/test_slurm_executor.py runs it on a real
cluster); one that waits for a job Slurm has not got, or that has ended, waits in Trainyard. Where Slurm lets
the dependant go before Trainyard has settled its dependencies, Trainyard's judgment decides."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import update

from core.config import get_settings
from core.db import session_scope
from core.dependencies import DEPENDENCY_FAILED, reconcile_dependencies
from core.models import Job
from core.states import JobStatus
from tests.unit.worker.test_dependencies import dependant, end
from worker.executors.slurm import commands
from worker.executors.slurm.commands import SlurmJob
from worker.executors.slurm.follow import Follower
from worker.executors.slurm.handover import submit_queued

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


@pytest.fixture
def sbatched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The batch scripts handed to sbatch, each answered with a new Slurm job id."""
    scripts: list[str] = []

    def sbatch(script: str) -> int:
        scripts.append(script)
        return 100 + len(scripts)

    monkeypatch.setattr(commands, "sbatch", sbatch)
    return scripts


def dependencies_of(script: str) -> list[str]:
    return [line for line in script.splitlines() if "dependency" in line or "invalid-dep" in line]


def test_a_job_waiting_for_slurm_jobs_is_handed_over_at_once_with_afterok(
    database: WorkerDb, doorbell: Doorbell, sbatched: list[str]
) -> None:
    scripts = sbatched
    first, second, ended = database.add_job(), database.add_job(), database.add_job()
    on_both = dependant(database, first, second)
    on_ended = dependant(database, first, ended)
    end(ended, JobStatus.FAILED)  # not settled yet: its dependant is the reconciler's to cancel
    # Its dependencies were not Slurm's yet when this pass read the queue.
    assert submit_queued(get_settings()) == [first, second]
    assert submit_queued(get_settings()) == [on_both]
    assert dependencies_of(scripts[-1]) == [
        "#SBATCH --dependency=afterok:101:102",
        "#SBATCH --kill-on-invalid-dep=yes",
    ]
    assert (database.job(on_both).slurm_job_id, database.job(on_both).waiting_on) == (103, 2)
    assert dependencies_of(scripts[0]) == dependencies_of(scripts[1]) == []
    assert submit_queued(get_settings()) == []
    assert database.job(on_ended).slurm_job_id is None


def slurm_job(job_id: int, state: str, reason: str = "None") -> SlurmJob:
    return SlurmJob(job_id, f"trainyard-{job_id}", state, reason, 0, 0, None, None)


def test_a_dependant_slurm_let_go_first_waits_for_trainyard_to_settle_it(
    database: WorkerDb, doorbell: Doorbell, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = database.add_job(slurm_job_id=11)
    child = dependant(database, parent)
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == child).values(slurm_job_id=12))
    slurm = {11: slurm_job(11, "PENDING", "Resources")}
    cancelled: list[int] = []
    monkeypatch.setattr(commands, "show_jobs", lambda: slurm)
    monkeypatch.setattr(commands, "set_nice", lambda slurm_id, nice: None)
    monkeypatch.setattr(commands, "cancel", cancelled.append)
    follower = Follower(threading.Event())
    # Slurm has not judged the parent yet, Trainyard has: neither started nor ended on Slurm's word.
    for state, reason in (("RUNNING", "None"), ("CANCELLED", "DependencyNeverSatisfied")):
        slurm[12] = slurm_job(12, state, reason)
        follower.tick()
        assert (database.job(child).status, database.job(child).attempt) == (JobStatus.QUEUED, 0)
    end(parent, JobStatus.FAILED)
    reconcile_dependencies()
    slurm.update({11: slurm_job(11, "FAILED"), 12: slurm_job(12, "PENDING", "Dependency")})
    follower.tick()
    assert (database.job(child).status, database.job(child).status_reason) == (
        JobStatus.CANCELLED,
        DEPENDENCY_FAILED,
    )
    assert cancelled == [12], "its Slurm job, still pending, is cancelled"


def test_slurm_is_handed_a_waiting_job_once_it_is_released(
    database: WorkerDb, doorbell: Doorbell, sbatched: list[str]
) -> None:
    parent = database.add_job()
    waiting = dependant(database, parent)
    assert submit_queued(get_settings()) == [parent]
    end(parent, JobStatus.SUCCEEDED)
    reconcile_dependencies()
    assert submit_queued(get_settings()) == [waiting]

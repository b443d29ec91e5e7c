"""A Slurm attempt ends through the same shared ending as a local one (worker/attempts/watch.py): its state
read from what scontrol said, a retryable failure with no restart left ends saying its restarts were used up,
as a local job's does. Real SQLite, no Slurm: no command runs once no restart is left; the cluster's own
test is in tests/integration/test_slurm_executor.py."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from core.db import session_scope
from core.models import JobEvent
from core.states import JobStatus
from core.transitions import move
from worker.attempts.events import AttemptEvents
from worker.executors.local.leases import claim_job
from worker.executors.slurm.commands import SlurmJob
from worker.executors.slurm.follow import Follower
from worker.executors.slurm.followed import Followed
from worker.uploads import Uploads

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


def followed(job_id: int, run_dir: Path, state: str) -> Followed:
    closing = ExitStack()
    uploads = closing.enter_context(Uploads(job_id, run_dir, launcher_log=True))
    slurm = SlurmJob(41, "trainyard", state, "None", 0, 0, "node1", "node1")
    return Followed(
        job_id=job_id,
        slurm_id=41,
        attempt=1,
        restarts=0,
        run_dir=run_dir,
        batch_log=run_dir / "batch.log",
        events=AttemptEvents(job_id, None, uploads),
        uploads=closing,
        started_at=None,
        max_runtime_s=None,
        max_restarts=1,
        slurm=slurm,
    )


def test_a_node_failure_past_its_restarts_ends_failed_saying_so(database: WorkerDb, tmp_path: Path) -> None:
    job_id = database.add_job({**database.spec(gpus=[0]), "limits": {"max_restarts": 1}})
    claim_job(job_id)
    with session_scope() as session:
        move(session, job_id, JobStatus.STARTING, JobStatus.RUNNING)
        session.add(JobEvent(job_id=job_id, to_status=JobStatus.RESTARTING, attempt=0))  # its one restart
    attempt = followed(job_id, tmp_path, "NODE_FAIL")

    ended = attempt.ended()
    assert ended is not None and ended.retryable
    Follower(threading.Event())._end(attempt, ended)

    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.FAILED, "node_fail")
    assert job.message == "Slurm job 41 NODE_FAIL, and was not requeued (all 1 restarts used)"


def test_a_running_slurm_job_has_not_ended_and_a_forgotten_one_has(
    tmp_path: Path, database: WorkerDb
) -> None:
    attempt = followed(database.add_job(), tmp_path, "RUNNING")
    assert attempt.ended() is None
    attempt.slurm = None
    lost = attempt.ended()
    assert lost is not None and (lost.status, lost.reason) == (JobStatus.FAILED, "slurm_lost")
    attempt.uploads.close()

"""Restarts under the real runner with a fake trainer: retryable failures restart as the next attempt up to
limits.max_restarts; a recorded Python exception fails at once. The real-torchrun cases are in
tests/integration/test_faults_restart.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select

from core.db import session_scope
from core.models import JobEvent
from core.states import JobStatus
from worker.executors.local.runner import run_job
from worker.failure import FailureKind, classify_failure

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


def transitions(job_id: int) -> list[tuple[str, int]]:
    with session_scope() as session:
        query = select(JobEvent.to_status, JobEvent.attempt).where(JobEvent.job_id == job_id)
        rows = session.execute(query.order_by(JobEvent.id))
        return [(status, attempt) for status, attempt in rows]


def test_a_crash_restarts_up_to_max_restarts_then_fails(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("crash")
    job_id = database.add_job({**database.spec(), "limits": {"max_restarts": 2}})
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason, job.attempt) == (JobStatus.FAILED, "crash", 3)
    assert (job.message or "").endswith("(all 2 restarts used)")
    assert transitions(job_id) == [
        ("starting", 1),
        ("running", 1),
        ("restarting", 1),
        ("starting", 2),
        ("running", 2),
        ("restarting", 2),
        ("starting", 3),
        ("running", 3),
        ("failed", 3),
    ]


def test_a_recorded_exception_is_not_restarted(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("error_file")
    job_id = database.add_job({**database.spec(), "limits": {"max_restarts": 2}})
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason, job.attempt) == (JobStatus.FAILED, "exception", 1)
    assert job.message == "ValueError: bad batch"


def _error_file(run_dir: Path, message: str) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "error.json").write_text(json.dumps({"message": {"message": message}}))
    return run_dir


def test_classification(tmp_path: Path) -> None:
    assert classify_failure(tmp_path, -9) is FailureKind.CRASH
    assert classify_failure(tmp_path, 1) is FailureKind.CRASH  # no exception recorded
    gloo = "torch.distributed.DistBackendError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer"
    assert classify_failure(_error_file(tmp_path / "a", gloo), 1) is FailureKind.COMMUNICATION
    timeout = "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv"
    assert classify_failure(_error_file(tmp_path / "b", timeout), 1) is FailureKind.COMMUNICATION
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert classify_failure(_error_file(tmp_path / "c", oom), 1) is FailureKind.EXCEPTION
    assert classify_failure(_error_file(tmp_path / "d", "KeyError: 'x'"), 1) is FailureKind.EXCEPTION
    diverged = "NonFiniteLoss: the training loss was not finite (NaN or inf) at step 7; lower train.lr"
    assert classify_failure(_error_file(tmp_path / "e", diverged), 1) is FailureKind.NONFINITE_LOSS
    assert not FailureKind.NONFINITE_LOSS.retryable
    gone = "PlatformError: the checkpoint to resume from, /var/runs/3/checkpoints/s.pt, is not there"
    assert classify_failure(_error_file(tmp_path / "f", gone), 1) is FailureKind.PLATFORM
    assert FailureKind.PLATFORM.retryable  # the platform's fault: the restart policy tries again

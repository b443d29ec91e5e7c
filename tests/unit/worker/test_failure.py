"""An error of the user's code fails the job at once, restarts or not, with the user's traceback; and what a
job leaves in its run directory cannot make the worker read another file into the job's message."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from core.states import JobStatus
from worker.failure import ERROR_FILE, FailureKind, classify_failure, root_cause
from worker.runner import run_job

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

SECRET = "root:$6$hunter2"


# As torchrun's error file records a trainers.user_errors.UserCodeError: what failed, then the user's frames.
USER_ERROR = (
    "UserCodeError: user_code_error: model.factory 'models:build' raised KeyError: 1\n"
    "  models.py, line 3, in build\n"
    "    return Net(**kwargs)[1]"
)


def record(run_dir: Path, message: str) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    error = {"message": {"message": message, "extraInfo": {"py_callstack": "Traceback ..."}}}
    (run_dir / ERROR_FILE).write_text(json.dumps(error))
    return run_dir


def test_a_user_code_error_is_its_own_kind_and_not_retryable(tmp_path: Path) -> None:
    run_dir = record(tmp_path, USER_ERROR)
    assert classify_failure(run_dir, 1) is FailureKind.USER_CODE
    assert not FailureKind.USER_CODE.retryable
    assert root_cause(run_dir, 1) == USER_ERROR  # the user's frames, as the trainer wrote them
    # A gloo failure quoted inside the user's message is still the user's error; the marker must lead.
    record(tmp_path, "UserCodeError: user_code_error: loss raised DistBackendError: gloo/transport")
    assert classify_failure(run_dir, 1) is FailureKind.USER_CODE
    record(tmp_path, "ValueError: bad batch (not a UserCodeError: )")
    assert classify_failure(run_dir, 1) is FailureKind.EXCEPTION


def test_links_in_the_run_directory_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text(json.dumps({"message": {"message": f"ValueError: {SECRET}"}}) + "\nTraceback\n")
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    os.symlink(secret, run_dir / ERROR_FILE)
    os.symlink(secret, run_dir / "logs" / "rank0.log")
    assert classify_failure(run_dir, 1) is FailureKind.CRASH  # no error recorded, as far as the worker reads
    assert SECRET not in root_cause(run_dir, 1)
    (run_dir / "logs" / "rank0.log").unlink()
    (run_dir / "logs").rmdir()
    os.symlink(tmp_path, run_dir / "logs")  # a whole folder of someone else's logs
    (tmp_path / "rank0.log").write_text(f"Traceback: {SECRET}\n")
    assert root_cause(run_dir, 1) == "exit code 1; no log output"


def test_a_job_whose_code_fails_fails_at_once_with_restarts_left(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("user_code_error")
    job_id = database.add_job({**database.spec(), "limits": {"max_restarts": 2}})
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason, job.attempt) == (JobStatus.FAILED, "user_code_error", 1)
    assert job.message == (
        "UserCodeError: user_code_error: model.factory 'models:build' raised KeyError: 1\n"
        "  models.py, line 3, in build"
    )

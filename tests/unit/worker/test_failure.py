"""An error of the user's code fails the job at once, restarts or not, with the user's traceback; and what a
job leaves in its run directory cannot make the worker read another file into the job's message."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from core.states import JobStatus
from worker.executors.local.runner import run_job
from worker.failure import ERROR_FILE, FailureKind, classify_failure, root_cause

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


def torchrun_report(run_dir: Path, *failures: tuple[str, int, int]) -> Path:
    """The launcher log's failure report as torchrun prints it: (time, rank, exit code) per failed rank."""
    blocks = [
        f"[{i}]:\n  time      : 2026-11-26_{at}\n  host      : box\n"
        f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: {100 + rank})\n"
        for i, (at, rank, code) in enumerate(failures)
    ]
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (run_dir / "logs" / "launcher.log").write_text("ChildFailedError:\nFailures:\n" + "".join(blocks))
    return run_dir


GLOO = "torch.distributed.DistBackendError: [gloo/transport/tcp/pair.cc:534] Connection reset by peer"


def test_a_rank_killed_by_a_signal_is_the_cause_not_its_peers_connection_error(tmp_path: Path) -> None:
    """Rank 1 SIGKILLed: rank 0's gloo error reached the error file first, in the same second."""
    run_dir = torchrun_report(record(tmp_path / "kill", GLOO), ("07:18:42", 0, 1), ("07:18:43", 1, -9))
    assert classify_failure(run_dir, 1) is FailureKind.CRASH
    cause = root_cause(run_dir, 1)
    assert cause.startswith("rank 1 was killed by signal SIGKILL; the other ranks then failed talking to it")
    assert "Connection reset by peer" in cause
    # No error file at all (torchrun stopped the survivor with SIGTERM before it raised).
    quiet = torchrun_report(tmp_path / "quiet", ("07:18:42", 0, -15), ("07:18:42", 1, -9))
    assert root_cause(quiet, 1) == "rank 1 was killed by signal SIGKILL"


def test_a_rank_torchrun_killed_after_its_grace_is_not_the_cause(tmp_path: Path) -> None:
    """Rank 1 stopped (SIGSTOP): rank 0 timed out first; torchrun SIGKILLed rank 1 30 s later."""
    run_dir = torchrun_report(record(tmp_path, GLOO), ("07:18:12", 0, 1), ("07:18:42", 1, -9))
    assert classify_failure(run_dir, 1) is FailureKind.COMMUNICATION
    # An earlier attempt's report, earlier in the same launcher log, speaks of that attempt alone.
    log = run_dir / "logs" / "launcher.log"
    latest = log.read_text()
    earlier = torchrun_report(tmp_path / "earlier", ("07:10:00", 1, -9))
    log.write_text((earlier / "logs" / "launcher.log").read_text() + latest)
    assert classify_failure(run_dir, 1) is FailureKind.COMMUNICATION
    assert root_cause(run_dir, 1) == GLOO
    # An error of the job's own (not a peer's death) stays the cause, whatever else was killed.
    own = torchrun_report(record(tmp_path / "own", "KeyError: 'x'"), ("07:18:42", 0, 1), ("07:18:42", 1, -9))
    assert root_cause(own, 1) == "KeyError: 'x'"


def test_a_jobs_secrets_are_masked_in_its_failure_and_a_cut_line_is_not_quoted(tmp_path: Path) -> None:
    """The message quotes the job's output into its row, events and webhooks: the values its ranks were
    given become ****, and a tail read that starts inside a line (maybe inside a value) leaves that line."""
    value = "hf_tok3n-value"
    run_dir = record(tmp_path / "raised", f"ValueError: bad token {value}")
    assert root_cause(run_dir, 1, [value]) == "ValueError: bad token ****"
    printed = tmp_path / "printed"
    (printed / "logs").mkdir(parents=True)
    # The log's last 64 KiB start 4 bytes into the value: its end would not be recognised as one.
    # Few lines, so that the cut one would be among the 20 quoted.
    log = f"token {value}\n" + ("x" * 3851 + "\n") * 16 + "y" * 3853 + f"\nagain {value}\nTraceback: failed\n"
    assert len(log) - 64 * 1024 == log.index(value) + 4
    (printed / "logs" / "rank0.log").write_text(log)
    cause = root_cause(printed, 1, [value])
    assert cause.endswith("again ****\nTraceback: failed")
    assert value[4:] not in cause

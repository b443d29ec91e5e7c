"""How an ended Slurm job ends its Trainyard job: Slurm's own ends by name, the ranks' exits classified from
the run directory as a local job's are, and a node task's own error quoted from the batch log."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from core.states import JobStatus
from tests.unit.worker.test_slurm_commands import fake
from worker.attempts.ends import Outcome, exit_outcome
from worker.executors.slurm.attempts import node_error_mark
from worker.executors.slurm.commands import SlurmJob
from worker.executors.slurm.outcomes import ENDED, SLURM_CANCELLED, WAITING, ended, node_error
from worker.failure import USER_CODE_MARKER, FailureKind


def slurm(state: str, exit_code: int = 0) -> SlurmJob:
    return SlurmJob(41, "trainyard-7", state, "None", exit_code, 0, "tynode1", "tynode[1-2]")


@pytest.fixture(autouse=True)
def sacct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cluster without accounting, as the tests' own, unless a test makes sacct answer."""
    folder = tmp_path / "bin"
    fake(folder, "sacct", "echo 'Slurm accounting storage is disabled' >&2\nexit 1")
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder / "sacct"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / "7"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def batch_log(tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / ".slurm" / "7"
    folder.mkdir(parents=True)
    return folder / "batch.log"


def test_waiting_and_ended_states_are_apart() -> None:
    assert not WAITING & ENDED
    assert "RUNNING" not in WAITING | ENDED


@pytest.mark.parametrize(
    ("state", "status", "reason", "retryable"),
    [
        ("TIMEOUT", JobStatus.TIMED_OUT, "max_runtime", False),
        ("DEADLINE", JobStatus.TIMED_OUT, "max_runtime", False),
        ("CANCELLED", JobStatus.CANCELLED, SLURM_CANCELLED, False),
        ("NODE_FAIL", JobStatus.FAILED, "node_fail", True),
        ("PREEMPTED", JobStatus.FAILED, "preempted", True),
        ("BOOT_FAIL", JobStatus.FAILED, "boot_fail", True),
        ("OUT_OF_MEMORY", JobStatus.FAILED, "out_of_memory", True),
    ],
)
def test_slurm_s_own_ends_are_named(
    state: str, status: JobStatus, reason: str, retryable: bool, run_dir: Path, batch_log: Path
) -> None:
    # A node error in the log does not hide how Slurm ended the job.
    batch_log.write_text(f"{node_error_mark(0)}no attempt from the Trainyard worker\n")
    outcome = ended(slurm(state, -9), run_dir, batch_log)
    assert (outcome.status, outcome.reason, outcome.retryable) == (status, reason, retryable)
    assert outcome.message.startswith(f"Slurm job 41 {state}")


def test_completed_with_exit_0_succeeded(run_dir: Path, batch_log: Path) -> None:
    assert ended(slurm("COMPLETED"), run_dir, batch_log) == exit_outcome(run_dir, 0)
    assert ended(slurm("COMPLETED"), run_dir, batch_log).status is JobStatus.SUCCEEDED


def test_a_node_s_error_in_the_batch_log_is_a_launch_error_that_quotes_it(
    run_dir: Path, batch_log: Path
) -> None:
    batch_log.write_text(
        "srun: error: tynode2: task 1: Exited with exit code 3\n"
        f"{node_error_mark(0)}no attempt from the Trainyard worker at /shared/attempt-0.json after 300 s\n"
        f"{node_error_mark(0)}the run directory /shared/runs/7 is not on node tynode2\n"
    )
    outcome = ended(slurm("FAILED", 3), run_dir, batch_log)
    assert outcome == Outcome(
        JobStatus.FAILED,
        "launch_error",
        "Slurm job 41 FAILED: the run directory /shared/runs/7 is not on node tynode2",
    )


def test_an_earlier_attempt_s_node_error_does_not_name_a_later_end(run_dir: Path, batch_log: Path) -> None:
    batch_log.write_text(f"{node_error_mark(0)}the run directory /shared/runs/7 is not on node tynode2\n")
    user_code_error(run_dir)
    requeued_once = replace(slurm("FAILED", 1), restarts=1)
    assert ended(requeued_once, run_dir, batch_log).reason == "user_code_error"


def user_code_error(run_dir: Path) -> None:
    """What torchrun's error file holds when the bundle's own code raised (trainers/user_errors.py)."""
    message = f"{USER_CODE_MARKER}user_code_error: model factory failed: ZeroDivisionError"
    (run_dir / "error.json").write_text(json.dumps({"message": {"message": message, "extraInfo": {}}}))


def test_a_failure_without_a_node_error_is_classified_from_the_run_directory(
    run_dir: Path, batch_log: Path
) -> None:
    user_code_error(run_dir)
    batch_log.write_text("srun: error: tynode1: task 0: Exited with exit code 1\n")
    outcome = ended(slurm("FAILED", 1), run_dir, batch_log)
    assert outcome == exit_outcome(run_dir, 1)
    assert (outcome.reason, outcome.retryable) == (FailureKind.USER_CODE, False)
    assert "model factory failed" in outcome.message


def test_a_rank_killed_by_a_signal_is_a_crash_a_restart_may_get_past(run_dir: Path, batch_log: Path) -> None:
    outcome = ended(slurm("FAILED", -9), run_dir, batch_log)
    assert (outcome.status, outcome.reason, outcome.retryable) == (JobStatus.FAILED, FailureKind.CRASH, True)


def test_failed_with_exit_0_is_still_a_failure(run_dir: Path, batch_log: Path) -> None:
    assert ended(slurm("FAILED", 0), run_dir, batch_log).status is JobStatus.FAILED


def test_node_error_is_none_without_a_log_or_an_error(batch_log: Path) -> None:
    assert node_error(batch_log, 0) is None
    batch_log.write_text("srun: Job step aborted\n")
    assert node_error(batch_log, 0) is None


def test_node_error_refuses_a_planted_link(tmp_path: Path, batch_log: Path) -> None:
    elsewhere = tmp_path / "elsewhere.log"
    elsewhere.write_text(f"{node_error_mark(0)}a message someone else chose\n")
    batch_log.symlink_to(elsewhere)
    assert node_error(batch_log, 0) is None


def test_a_cancel_from_outside_says_so_and_that_slurm_names_no_one(run_dir: Path, batch_log: Path) -> None:
    outcome = ended(slurm("CANCELLED", -15), run_dir, batch_log)
    assert outcome == Outcome(
        JobStatus.CANCELLED,
        SLURM_CANCELLED,
        "Slurm job 41 CANCELLED outside Trainyard (Slurm names who only in sacct's records)",
    )


def test_a_cancel_from_outside_names_who_from_accounting_and_slurm_s_reason(
    sacct: Path, run_dir: Path, batch_log: Path
) -> None:
    fake(sacct.parent, "sacct", "echo 'CANCELLED by 0'")
    job = replace(slurm("CANCELLED"), reason="DependencyNeverSatisfied")
    assert ended(job, run_dir, batch_log).message == (
        "Slurm job 41 CANCELLED by root (uid 0), outside Trainyard; Slurm's reason: DependencyNeverSatisfied"
    )

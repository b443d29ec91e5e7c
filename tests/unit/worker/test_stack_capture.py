"""Every rank's stacks on request, on real processes: a rank registers its dump (trainers/stack_dump.py), the
worker signals the process its pid file names (worker/executors/local/stack_signal.py) and reads the dump
through the confined opener (worker/attempts/stack_capture.py). A link planted where the dump or the pid file
should be is not followed, and a pid file of another attempt signals nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobspec.stacks import JOB_TOKEN_ENV, pid_file, stack_file
from worker.attempts.stack_capture import RankPid, capture_ranks, rank_pids, read_dump
from worker.executors.local.kill import JobMark
from worker.executors.local.stack_signal import signal_ranks

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "host/7/1"
RANK_SCRIPT = """
import sys, time
from pathlib import Path
from trainers.stack_dump import register_stack_dump

def waits_here():
    print("ready", flush=True)  # from inside: a dump taken once the test reads it has this frame
    time.sleep(60)

register_stack_dump(Path(sys.argv[1]), int(sys.argv[2]))
waits_here()
"""


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / "7"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def mark(run_dir: Path) -> JobMark:
    return JobMark(TOKEN, run_dir)


@pytest.fixture
def rank(run_dir: Path) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, JOB_TOKEN_ENV: TOKEN, "TRAINYARD_RUN_DIR": str(run_dir), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", RANK_SCRIPT, str(run_dir), "3"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


class SignalLog:
    """signal_ranks, remembering what it was asked."""

    def __init__(self, mark: JobMark) -> None:
        self.mark = mark
        self.asked: dict[int, RankPid] = {}

    def __call__(self, ranks: dict[int, RankPid]) -> list[int]:
        self.asked = ranks
        return signal_ranks(self.mark, ranks)


def test_a_rank_dumps_every_thread_and_runs_on(
    run_dir: Path, mark: JobMark, rank: subprocess.Popen[str]
) -> None:
    first = capture_ranks(run_dir, "host-a", signal_ranks=lambda ranks: signal_ranks(mark, ranks))
    assert [r["rank"] for r in first.ranks] == [3] and first.message is None
    assert first.ranks[0]["host"] == "host-a"
    assert "in waits_here" in first.ranks[0]["stack"]
    assert rank.poll() is None, "the signal does not end the rank"
    # A second capture holds the second dump alone, not the first again.
    second = capture_ranks(run_dir, "host-a", signal_ranks=lambda ranks: signal_ranks(mark, ranks))
    assert second.ranks[0]["stack"].count("in waits_here") == 1
    assert (run_dir / stack_file(3)).read_text().count("in waits_here") == 2


def test_a_dump_is_masked_with_the_values_the_ranks_were_given(
    run_dir: Path, mark: JobMark, rank: subprocess.Popen[str]
) -> None:
    """A dump is the job's own file, kept in SQL and shown to the job's readers: a value the ranks were
    given (here a function's name stands for it) is masked as in their logs."""
    taken = capture_ranks(run_dir, "host-a", lambda ranks: signal_ranks(mark, ranks), ["waits_here"])
    assert "in ****" in taken.ranks[0]["stack"] and "waits_here" not in repr(taken)


def test_a_pid_file_of_another_attempt_signals_nothing(run_dir: Path, rank: subprocess.Popen[str]) -> None:
    later = JobMark("host/7/2", run_dir)
    taken = capture_ranks(run_dir, "host-a", signal_ranks=lambda ranks: signal_ranks(later, ranks))
    assert taken.ranks == [] and "could be signalled" in (taken.message or "")
    assert rank.poll() is None


def test_a_link_planted_for_the_dump_is_not_followed(
    run_dir: Path, mark: JobMark, rank: subprocess.Popen[str], tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET of the worker's host\n")
    (run_dir / stack_file(3)).unlink()
    (run_dir / stack_file(3)).symlink_to(secret)
    assert read_dump(run_dir, 3, 0) is None
    log = SignalLog(mark)
    taken = capture_ranks(run_dir, "host-a", signal_ranks=log)
    assert log.asked == {}, "a rank whose dump is refused is not even signalled"
    assert "SECRET" not in repr(taken)


def test_a_link_planted_for_the_pid_file_is_not_followed(run_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "pid"
    elsewhere.write_text(f"{os.getpid()} {TOKEN}\n")
    (run_dir / "stacks").mkdir()
    (run_dir / pid_file(0)).symlink_to(elsewhere)
    assert rank_pids(run_dir) == {}


def test_a_rank_that_never_dumps_holds_the_capture_only_its_wait(run_dir: Path, mark: JobMark) -> None:
    (run_dir / "stacks").mkdir()
    (run_dir / pid_file(0)).write_text(f"999999 {TOKEN}\n")
    start = time.monotonic()
    taken = capture_ranks(run_dir, "host-a", signal_ranks=lambda ranks: list(ranks))
    assert time.monotonic() - start < 5
    assert taken.ranks == [] and "wrote no stack" in (taken.message or "")

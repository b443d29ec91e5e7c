"""Stopping a job finds every process carrying its token, even those in sessions of their own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from worker.kill import KILL_WAIT_S, kill_job
from worker.launch import JOB_TOKEN_ENV

GRACE_S = 0.5

# A parent like torchrun: ranks in new sessions (one of which ignores SIGTERM), and a grandchild like a
# data-loader worker. Every process appends its pid to the file given as argv[1].
TREE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    pids, role = sys.argv[1], sys.argv[2]
    with open(pids, "a") as f:
        f.write(f"{os.getpid()}\\n")
    if role == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    children = {"parent": ["rank", "stubborn"], "rank": ["loader"]}.get(role, [])
    for child in children:
        subprocess.Popen([sys.executable, __file__, pids, child], start_new_session=True)
    time.sleep(120)
    """
)


def start(tree: Path, pids: Path, token: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != JOB_TOKEN_ENV}
    if token:
        env[JOB_TOKEN_ENV] = token
    return subprocess.Popen([sys.executable, str(tree), str(pids), "parent"], env=env, start_new_session=True)


def wait_for_pids(pids: Path, count: int) -> list[int]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = [int(line) for line in pids.read_text().split()] if pids.exists() else []
        if len(found) == count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"the process tree did not start: {pids.read_text() if pids.exists() else ''}")


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    return script


def test_kill_reaches_every_session_and_spares_others(tree: Path, tmp_path: Path) -> None:
    token, other_token = f"testhost/{os.getpid()}/1", f"testhost/{os.getpid()}/2"
    job = start(tree, tmp_path / "job.pids", token)
    other = start(tree, tmp_path / "other.pids", other_token)
    unmarked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        job_pids = wait_for_pids(tmp_path / "job.pids", 4)
        other_pids = wait_for_pids(tmp_path / "other.pids", 4)
        assert len({os.getsid(pid) for pid in job_pids}) == 4  # no two share a session (or a group)

        started = time.monotonic()
        assert kill_job(token, GRACE_S, group=job.pid) == []
        elapsed = time.monotonic() - started

        assert not [pid for pid in job_pids if running(pid)]
        assert GRACE_S <= elapsed < GRACE_S + KILL_WAIT_S  # the stubborn rank needed SIGKILL
        assert all(running(pid) for pid in other_pids)
        assert unmarked.poll() is None
        assert job.wait(timeout=1) is not None
    finally:
        for leftover in (token, other_token):
            kill_job(leftover, 0)
        unmarked.kill()
        for proc in (job, other, unmarked):
            proc.wait(timeout=5)


def test_nothing_to_kill_returns_at_once() -> None:
    started = time.monotonic()
    assert kill_job("testhost/no-such-job/1", 10) == []
    assert time.monotonic() - started < 5

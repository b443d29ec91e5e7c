"""Stopping a job: every process with its mark, in whatever session; on cancel, timeout and shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
from sqlalchemy import select

from core.db import session_scope
from core.launch import JOB_TOKEN_ENV
from core.models import GpuLease
from core.states import JobStatus
from core.transitions import move
from worker.executors.local import runner
from worker.executors.local.kill import KILL_WAIT_S, JobMark, job_processes, kill_job, mark_for
from worker.executors.local.runner import run_job

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

GRACE_S = 0.5

# A parent like torchrun: ranks in new sessions (one of which ignores SIGTERM), and a grandchild like a
# data-loader worker. Every process appends its pid to the file given as argv[1].
TREE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    pids, role = sys.argv[1], sys.argv[2]
    if role == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(pids, "a") as f:
        f.write(f"{os.getpid()}\\n")
    children = {"parent": ["rank", "stubborn"], "rank": ["loader"]}.get(role, [])
    for child in children:
        subprocess.Popen([sys.executable, __file__, pids, child], start_new_session=True)
    time.sleep(120)
    """
)


def start(tree: Path, pids: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, **env}
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
    token = f"testhost/{os.getpid()}"
    mark = JobMark(f"{token}/1", tmp_path / "runs" / "1")
    # Another attempt of the job, and the same job id of another deployment (another runs directory).
    others = [JobMark(f"{token}/2", mark.run_dir), JobMark(mark.token, tmp_path / "other" / "1")]
    job = start(tree, tmp_path / "job.pids", {JOB_TOKEN_ENV: mark.token, **mark.env()})
    spared = [
        start(tree, tmp_path / f"other{i}.pids", {JOB_TOKEN_ENV: other.token, **other.env()})
        for i, other in enumerate(others)
    ]
    unmarked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        job_pids = wait_for_pids(tmp_path / "job.pids", 4)
        other_pids = [pid for i in range(2) for pid in wait_for_pids(tmp_path / f"other{i}.pids", 4)]
        assert len({os.getsid(pid) for pid in job_pids}) == 4  # no two share a session (or a group)

        started = time.monotonic()
        assert kill_job(mark, GRACE_S, group=job.pid) == []
        elapsed = time.monotonic() - started

        assert [pid for pid in job_pids if running(pid)] == []  # each one found waited for until it exited
        assert GRACE_S <= elapsed < GRACE_S + KILL_WAIT_S  # the stubborn rank needed SIGKILL
        assert all(running(pid) for pid in other_pids)
        assert unmarked.poll() is None
        assert job.wait(timeout=1) is not None
    finally:
        for leftover in (mark, *others):
            kill_job(leftover, 0)
        unmarked.kill()
        for proc in (job, *spared, unmarked):
            proc.wait(timeout=5)


# On SIGTERM it becomes a process with no environment that ignores SIGTERM: no scan by the mark finds it
# any more, as none finds a process in its exit path, whose memory is already released.
SHEDS_ITS_MARK = textwrap.dedent(
    """
    import os, signal, sys, time
    deaf = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    signal.signal(signal.SIGTERM, lambda *_: os.execve(sys.executable, [sys.executable, "-c", deaf], {}))
    open(sys.argv[1], "w").close()
    time.sleep(120)
    """
)


def test_a_process_found_once_is_the_jobs_until_it_has_exited(tmp_path: Path) -> None:
    mark = JobMark(f"testhost/{os.getpid()}/1", tmp_path / "runs" / "1")
    script, ready = tmp_path / "sheds.py", tmp_path / "ready"
    script.write_text(SHEDS_ITS_MARK)
    env = {**os.environ, JOB_TOKEN_ENV: mark.token, **mark.env()}
    job = subprocess.Popen([sys.executable, str(script), str(ready)], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert kill_job(mark, GRACE_S) == []
        assert job.wait(timeout=1) == -9  # it outlived SIGTERM unmarked, and SIGKILL still found it
    finally:
        job.kill()
        job.wait(timeout=5)


def test_nothing_to_kill_returns_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    assert kill_job(JobMark("testhost/no-such-job/1", tmp_path), 10) == []
    assert time.monotonic() - started < 5


def run_in_thread(job_id: int) -> threading.Thread:
    thread = threading.Thread(target=run_job, args=(job_id,))
    thread.start()
    return thread


def wait_for_status(database: WorkerDb, job_id: int, status: JobStatus) -> None:
    deadline = time.monotonic() + 20
    while database.job(job_id).status != status:
        assert time.monotonic() < deadline, f"job {job_id} is {database.job(job_id).status}, not {status}"
        time.sleep(0.05)


def assert_stopped(database: WorkerDb, job_id: int, thread: threading.Thread) -> None:
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert job_processes(mark_for(job_id, 1, database.host, database.runs_dir)) == []
    with session_scope() as session:
        assert session.scalars(select(GpuLease)).all() == []


def test_cancel_stops_a_running_job(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("hang")
    job_id = database.add_job(database.spec(gpus=[0]))
    thread = run_in_thread(job_id)
    wait_for_status(database, job_id, JobStatus.RUNNING)
    assert job_processes(mark_for(job_id, 1, database.host, database.runs_dir))
    with session_scope() as session:  # what the API does
        move(session, job_id, JobStatus.RUNNING, JobStatus.CANCELLING, reason="user")
    assert_stopped(database, job_id, thread)
    assert database.job(job_id).status == JobStatus.CANCELLED


def test_max_runtime_times_the_job_out(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("hang")
    job_id = database.add_job({**database.spec(), "limits": {"max_runtime_s": 1}})
    thread = run_in_thread(job_id)
    assert_stopped(database, job_id, thread)
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.TIMED_OUT, "max_runtime")


def test_worker_shutdown_requeues_its_jobs(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("hang")
    job_id = database.add_job()
    thread = run_in_thread(job_id)
    wait_for_status(database, job_id, JobStatus.RUNNING)
    runner.SHUTDOWN.set()  # what Celery's worker_shutting_down signal does
    assert_stopped(database, job_id, thread)
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.QUEUED, "worker_shutdown")
    assert doorbell.rung == [job_id]

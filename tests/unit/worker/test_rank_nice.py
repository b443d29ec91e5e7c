"""A job's processes run below the worker's CPU priority (TRAINYARD_RANK_NICE, worker/executors/local/warm/
priority.py), so that CPU-heavy ranks cannot slow the API or the worker: a cold-started job, the standby
factory, its standbys and what they run, and a sandbox held for a standby; 0 leaves them at the worker's
own. The launcher is the worker's (worker/executors/local/runner.py::warm_launcher), made from the
settings."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from core.config import Settings, get_settings
from core.launch import JOB_TOKEN_ENV, RUN_DIR_ENV, Launch
from core.project import PROJECT_ROOT
from jobspec.session_nice import AUTOGROUP
from tests.integration.sandbox_launch import deploy, sandboxed_job
from tests.integration.test_sandbox_escape import worker_env
from tests.unit.trainers.test_session_nice import settled
from worker.executors.local.kill import JobMark, kill_job
from worker.executors.local.runner import warm_launcher
from worker.executors.local.warm.held_sandbox import hold_sandbox
from worker.executors.local.warm.launcher import WarmLauncher

__all__ = ["worker_env"]  # the escape test's fixture, used here too
TIMEOUT_S = 120
STEPS = 3  # short of 19, the cap, from a pytest run under `nice -n 15`: on and off still differ
# A process of the job: says who it is, then runs until it is stopped.
REPORT = """
import json, os, sys, time
with open(sys.argv[1], "w") as out:
    json.dump({"pid": os.getpid(), "group": os.getpgid(0), "nice": os.nice(0)}, out)
time.sleep(600)
"""


def expected(steps: int) -> int:
    """The niceness of a process started `steps` below this one, which stands for the worker."""
    return min(19, os.getpriority(os.PRIO_PROCESS, 0) + steps)


def reported(path: Path) -> dict[str, int]:
    """What REPORT wrote at `path`, once it has."""
    deadline = time.monotonic() + TIMEOUT_S
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"no report at {path}"
        time.sleep(0.05)
    return dict(json.loads(path.read_text()))


def job(run_dir: Path, argv: list[str]) -> tuple[Launch, JobMark]:
    """A launch of `argv` marked as a job's attempt, and the mark a kill finds it by."""
    mark = JobMark("test/7/1", run_dir)
    return Launch(argv, {"PATH": "/usr/bin:/bin", JOB_TOKEN_ENV: mark.token, RUN_DIR_ENV: str(run_dir)}), mark


@pytest.fixture(params=[0, STEPS], ids=["off", "on"])
def steps(request: pytest.FixtureRequest, env: Settings, monkeypatch: pytest.MonkeyPatch) -> int:
    """TRAINYARD_RANK_NICE."""
    monkeypatch.setenv("TRAINYARD_RANK_NICE", str(request.param))
    get_settings.cache_clear()
    return int(request.param)


@contextlib.contextmanager
def worker_launcher(monkeypatch: pytest.MonkeyPatch, warm: bool) -> Iterator[WarmLauncher]:
    """The worker's launcher, made from the settings; `warm`: TRAINYARD_WARM_LAUNCHER."""
    monkeypatch.setenv("TRAINYARD_WARM_LAUNCHER", str(warm).lower())
    get_settings.cache_clear()
    warm_launcher.cache_clear()
    launcher = warm_launcher()
    try:
        yield launcher
    finally:
        launcher.close()
        warm_launcher.cache_clear()


def test_a_cold_started_job_runs_below_the_worker(
    tmp_path: Path, steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "report.json"
    command, mark = job(tmp_path, [sys.executable, "-c", REPORT, str(report)])
    with worker_launcher(monkeypatch, warm=False) as launcher:
        process = launcher.start(command, tmp_path / "launcher.log")
        # `nice` execs the job's command: the pid the supervisor holds is the job's, and heads its group.
        assert reported(report) == {"pid": process.pid, "group": process.pid, "nice": expected(steps)}
        assert kill_job(mark, grace_s=5, group=process.pid) == []
        assert process.wait(TIMEOUT_S) != 0


def test_the_standby_factory_and_what_its_standbys_run_run_below_the_worker(
    tmp_path: Path, steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, rank = tmp_path / "report.json", tmp_path / "rank.py"
    rank.write_text(REPORT)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
    command, mark = job(tmp_path, [*torchrun, "--nproc-per-node", "1", str(rank), str(report)])
    with worker_launcher(monkeypatch, warm=True) as launcher:
        launcher.prepare()
        standby = launcher.standby
        # The niced factory imports torch and the trainer first: on a box the suite keeps busy that took
        # longer than the minute a job's launch gives a fork (FORK_WAIT_S).
        assert standby is not None and standby.forked(TIMEOUT_S)
        factory = psutil.Process(standby.pid).parent()
        assert factory is not None
        assert [factory.nice(), psutil.Process(standby.pid).nice()] == [expected(steps)] * 2
        if AUTOGROUP.exists():  # each heads a session: niceness counts between sessions only through it
            found = [settled(pid, expected(steps)) for pid in (factory.pid, standby.pid)]
            assert found == [expected(steps)] * 2
        process = launcher.start(command, tmp_path / "launcher.log")
        assert process is standby, "the job started cold"
        assert reported(report)["nice"] == expected(steps)  # the rank, a child of the standby's torchrun
        assert kill_job(mark, grace_s=5, group=process.pid) == []
        assert process.wait(TIMEOUT_S) != 0


def test_a_sandbox_held_for_a_standby_runs_below_the_worker(
    tmp_path: Path, steps: int, worker_env: dict[str, str]
) -> None:
    """A standby's child enters it (trainers/warm/enter.py) from the niced standby; bwrap and its holder are
    the job's processes too."""
    command, box, _ = sandboxed_job(deploy(tmp_path / "var"), [], worker_env)
    held = hold_sandbox(box, command, sys.executable, PROJECT_ROOT, steps)
    assert held is not None, "the sandbox did not come up"
    try:
        bwrap = psutil.Process(held.bwrap.pid)
        assert {found.nice() for found in [bwrap, *bwrap.children(recursive=True)]} == {expected(steps)}
    finally:
        for fd in held.fds.values():  # the lifeline's end among them: the holder exits, and the sandbox
            os.close(fd)
        assert held.bwrap.wait(TIMEOUT_S) == 0

"""The warm launcher: a standby that has imported torchrun becomes the job's torchrun, with the job's
environment and log, and the next standby is started; without one, a plain torchrun process starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from core.launch import Launch
from worker.runner import PROJECT_ROOT
from worker.standby import WarmLauncher

# Both ranks share the log, so each writes its line in one call: print's separate writes interleave.
RANK_SCRIPT = """
import os, sys
line = " ".join(["rank says", os.environ["JOB_MARKER"], os.environ["RANK"], os.environ["WORLD_SIZE"]])
os.write(1, (line + "\\n").encode())
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""
TIMEOUT_S = 120


def torchrun(tmp_path: Path, **env: str) -> Launch:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
    argv += ["--nproc-per-node", "2", str(script)]
    return Launch(argv=argv, env={"PATH": "/usr/bin:/bin", "JOB_MARKER": "job-7", **env})


@pytest.fixture
def launcher() -> WarmLauncher:
    return WarmLauncher(sys.executable, PROJECT_ROOT)


def test_the_standby_becomes_the_jobs_torchrun(tmp_path: Path, launcher: WarmLauncher) -> None:
    launcher.prepare()
    standby = launcher.standby
    assert standby is not None
    log = tmp_path / "launcher.log"
    process = launcher.start(torchrun(tmp_path), log)
    assert process is standby
    assert process.wait(TIMEOUT_S) == 0
    text = log.read_text()
    assert "rank says job-7 0 2" in text and "rank says job-7 1 2" in text
    follower = launcher.standby
    assert follower is not None and follower.pid != standby.pid and follower.poll() is None
    follower.kill()


def test_a_failing_rank_fails_the_standby_torchrun(tmp_path: Path, launcher: WarmLauncher) -> None:
    launcher.prepare()
    process = launcher.start(torchrun(tmp_path, EXIT_WITH="3"), tmp_path / "launcher.log")
    assert process.wait(TIMEOUT_S) != 0
    assert "ChildFailedError" in (tmp_path / "launcher.log").read_text()
    if launcher.standby is not None:
        launcher.standby.kill()


@pytest.mark.parametrize("standby", ["disabled", "dead"])
def test_without_a_live_standby_torchrun_starts_cold(tmp_path: Path, standby: str) -> None:
    launcher = WarmLauncher(sys.executable, PROJECT_ROOT, enabled=standby != "disabled")
    launcher.prepare()
    if launcher.standby is not None:
        launcher.standby.kill()
        launcher.standby.wait()
        dead_pid = launcher.standby.pid
    process = launcher.start(torchrun(tmp_path), tmp_path / "launcher.log")
    assert process.wait(TIMEOUT_S) == 0
    assert "rank says job-7 0 2" in (tmp_path / "launcher.log").read_text()
    if standby == "dead":
        assert process.pid != dead_pid
        assert launcher.standby is not None
        launcher.standby.kill()
    else:
        assert launcher.standby is None


def test_a_standby_exits_when_its_worker_goes_away(launcher: WarmLauncher) -> None:
    launcher.prepare()
    standby = launcher.standby
    assert standby is not None and standby.stdin is not None
    standby.stdin.close()  # what the worker's death does to the pipe
    assert standby.wait(TIMEOUT_S) == 0


def test_a_command_that_wraps_torchrun_starts_cold_and_leaves_the_standby(
    tmp_path: Path, launcher: WarmLauncher
) -> None:
    """A sandbox's command (core/sandbox.py) puts bwrap before torchrun: the standby, outside any sandbox,
    must not run it in its stead."""
    launcher.prepare()
    standby = launcher.standby
    assert standby is not None
    plain = torchrun(tmp_path)
    process = launcher.start(Launch(["env", *plain.argv], plain.env), tmp_path / "launcher.log")
    assert process is not standby and launcher.standby is standby and standby.poll() is None
    assert process.wait(TIMEOUT_S) == 0
    assert "rank says job-7 0 2" in (tmp_path / "launcher.log").read_text()
    standby.kill()

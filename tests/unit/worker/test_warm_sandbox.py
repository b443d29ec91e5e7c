"""A sandboxed job started warm (worker/executors/local/warm/held_sandbox.py, trainers/warm/enter.py) is held
to what a cold one is: the hostile rank of tests/integration/test_sandbox_escape.py, run by the standby's
child that entered the job's sandbox, reaches nothing that it could not reach cold, and a cancel leaves no
process of the sandbox."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
from pathlib import Path

import psutil

from core.launch import Launch
from core.project import PROJECT_ROOT
from core.sandbox import Sandbox, sandbox_argv
from tests.integration.sandbox_launch import deploy, sandboxed_job
from tests.integration.test_sandbox_escape import (
    CANCELLED_RANK,
    HOSTILE,
    LIMITS,
    assert_contained,
    hostile_plan,
    listeners,
    sentinel,
    worker_env,
)
from tests.unit.worker.test_standby import waiting_standby
from worker.executors.local.kill import job_processes, kill_job
from worker.executors.local.warm.launcher import WarmLauncher

__all__ = ["listeners", "worker_env"]  # the escape test's fixtures, used here too
TIMEOUT_S = 120


def unconfined(command: Launch, box: Sandbox) -> Launch:
    """The job's torchrun command without the sandbox's prefix, as the runner hands it to the launcher."""
    return Launch(command.argv[len(sandbox_argv(box)) :], command.env)


def warm_launcher() -> WarmLauncher:
    """A launcher with its standby forked: a job launched while the factory still imports starts cold."""
    launcher = WarmLauncher(sys.executable, PROJECT_ROOT)
    waiting_standby(launcher)
    return launcher


def test_a_hostile_rank_started_warm_reaches_nothing_of_the_worker(
    tmp_path: Path, worker_env: dict[str, str], listeners: list[socket.socket]
) -> None:
    deployment = deploy(tmp_path / "var", **LIMITS)  # type: ignore[arg-type]
    script = deployment.run_dir / HOSTILE.name
    shutil.copy(HOSTILE, script)
    rank = [str(script), str(deployment.run_dir / "plan.json"), str(deployment.run_dir / "report.json")]
    command, box, _ = sandboxed_job(deployment, rank, worker_env)
    job_uid = box.run_as
    victim = sentinel(job_uid if job_uid is not None else 0)
    launcher = warm_launcher()
    standby = launcher.standby
    try:
        hostile_plan(deployment, listeners, victim.pid, Path.home())
        log = deployment.run_dir / "launcher.log"
        process = launcher.start(unconfined(command, box), log, box)
        assert process is standby, "the job started cold"
        assert process.wait(TIMEOUT_S) == 0, log.read_text()
        seen = json.loads((deployment.run_dir / "report.json").read_text())
        assert_contained(seen, deployment, listeners, box)
        assert victim.poll() is None
        if job_uid is not None:
            assert seen["uid"] == job_uid
    finally:
        victim.kill()
        launcher.close()


def test_cancel_of_a_warm_job_stops_the_rank_cleanly_and_leaves_no_process_of_the_sandbox(
    tmp_path: Path, worker_env: dict[str, str]
) -> None:
    deployment = deploy(tmp_path / "var")
    script = deployment.run_dir / "rank.py"
    script.write_text(CANCELLED_RANK)
    command, box, mark = sandboxed_job(deployment, [str(script), str(deployment.run_dir)], worker_env)
    launcher = warm_launcher()
    standby = launcher.standby
    try:
        process = launcher.start(unconfined(command, box), deployment.run_dir / "launcher.log", box)
        assert process is standby
        deadline = time.monotonic() + 60
        while not (deployment.run_dir / "ready").exists():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        # The held sandbox's bwrap carries the job's mark, the standby and its children the standby's id.
        marked = job_processes(mark)
        sandbox = {p for found in marked for p in [found, *found.children(recursive=True)]}
        unmarked = [p for p in sandbox if p.environ() == {}]
        assert len(unmarked) == 1 and not mark.matches(unmarked[0].environ())  # the job mark cannot find it

        survivors = kill_job(mark, grace_s=5, group=process.pid)  # as the supervisor stops a cancelled job
        process.wait(timeout=10)
        assert survivors == []
        assert (deployment.run_dir / "stopped").read_text() == "on SIGTERM\n"
        # The held sandbox's bwrap exits once its pid 1 has: after the job's processes, on a busy box.
        _, alive = psutil.wait_procs(list(sandbox), timeout=5)
        left = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], f"left behind: {[p.cmdline() for p in left]}"
    finally:
        launcher.close()

"""A process that heads a job's session gives the session (its autogroup, sched(7)) its own niceness, so that
niceness counts between sessions too: jobspec/session_nice.py."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobspec.session_nice import AUTOGROUP

TIMEOUT_S = 30
# Heads a session of its own at `nice` 5 and sets its autogroup, then waits to be read and stopped.
HEAD = "from jobspec.session_nice import give_session_my_nice as give; give(); import time; time.sleep(60)"

pytestmark = pytest.mark.skipif(not AUTOGROUP.exists(), reason="this kernel has no autogroups")


def session_nice(pid: int) -> int:
    """The niceness of `pid`'s autogroup: /proc/<pid>/autogroup reads `/autogroup-<n> nice <k>`."""
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def settled(pid: int, nice: int) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while (found := session_nice(pid)) != nice and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_session_heads_started_at_once_each_give_their_session_their_niceness() -> None:
    """Five at once: the kernel refuses an unprivileged change within 100 ms of another, so all but one wait
    their turn in a thread; each session ends at nice 5 (started at 0, as a new session's autogroup is)."""
    heads = [
        subprocess.Popen(["nice", "-n", "5", sys.executable, "-c", HEAD], start_new_session=True)
        for _ in range(5)
    ]
    try:
        nice = min(19, int(subprocess.check_output(["nice"]).decode()) + 5)
        assert [settled(head.pid, nice) for head in heads] == [nice] * 5
    finally:
        for head in heads:
            head.kill()
            head.wait()

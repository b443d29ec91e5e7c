"""STACKS_SIGNAL to the ranks of one attempt on this host, as their pid files name them
(worker/attempts/stack_capture.py reads those): only a process of the attempt (kill.py's mark) is signalled,
and only the one whose pid, as its own pid namespace numbers it (the sandbox's), is the pid its file says, so
a file left by an earlier attempt, or one a job wrote to name another process, signals nothing else."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

from jobspec.stacks import STACKS_SIGNAL
from worker.attempts.stack_capture import RankPid
from worker.executors.local.kill import JobMark, job_processes


def own_pid(pid: int) -> int | None:
    """The pid the process `pid` has in its innermost pid namespace (/proc's NSpid); None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    return pid  # a kernel before 4.1 shows no NSpid, and no process there is in a namespace of its own


def signal_ranks(mark: JobMark, ranks: dict[int, RankPid]) -> list[int]:
    """The ranks signalled."""
    wanted = {said.pid: rank for rank, said in ranks.items() if said.token == mark.token}
    signalled = []
    for proc in job_processes(mark):
        rank = wanted.get(own_pid(proc.pid) or -1)
        if rank is None:
            continue
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.send_signal(STACKS_SIGNAL)
            signalled.append(rank)
    return signalled

"""The CPU priority of a job's processes: below the service's own, so that a job's CPU-heavy ranks and their
data loader workers take the cores the API and the worker leave, rather than slowing every user's calls.

Each process that starts a job's processes (a cold torchrun, the standby factory, a held sandbox's bwrap) is
started through `nice`: it lowers its own priority and execs the command, so the process keeps its pid and
heads its own group (the supervisor's group kill and kill.py's mark find the command itself), and every
process it starts inherits the niceness: each standby the factory forks, torchrun's ranks, their loader
workers. The other way, setpriority in the child before its exec, needs Popen's preexec_fn, which is unsafe
in the threaded worker. Only a privileged process may raise its priority again, so a job cannot undo it.

Each of them heads a session of its own, and on a kernel with autogroups niceness orders processes only within
a session. The processes we write give their sessions their niceness (jobspec/session_nice.py: a rank, the
standby factory, a standby); the worker leaves the sessions of a cold torchrun and of a sandbox's bwrap at
the default. It set them too for a while, and in the 60-minute PostgreSQL soak a cold torchrun then took
over a minute to import torch on the saturated box: jobs restarted after a worker's kill never reached their
first step before the next kill, and none succeeded in 20 minutes (docs/reliability.md, row 100).
"""

from __future__ import annotations

NICE = "/usr/bin/nice"  # coreutils; an absolute path, as a job's PATH is the job's own


def niced(argv: list[str], nice: int) -> list[str]:
    """`argv` run `nice` steps below the worker's priority (TRAINYARD_RANK_NICE; 0: at the worker's own)."""
    return argv if nice == 0 else [NICE, "-n", str(nice), *argv]

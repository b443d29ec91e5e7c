"""Where a rank leaves its Python stacks when the worker asks for them, shared by the trainer (which registers
the dump) and the worker (which signals the rank and reads the dump); no torch import.

faulthandler, registered on STACKS_SIGNAL at each rank's start (trainers/stack_dump.py), writes every thread's
stack from its C signal handler, so a rank blocked inside a collective's C++ wait answers too; it needs no
ptrace, which the sandbox forbids (py-spy would need it), and nothing installed.
"""

from __future__ import annotations

import re
import signal

STACKS_DIR = "stacks"
STACKS_SIGNAL = signal.SIGUSR2
# Set by the worker for every process of a job (core/launch.py); a rank writes it beside its pid, so a pid
# file left by an earlier attempt (or another node of the job, in a shared run directory) is never taken
# for one of this attempt's ranks.
JOB_TOKEN_ENV = "TRAINYARD_JOB_TOKEN"
# torch's flight recorder dumps here on a NCCL timeout, one file per rank: "<prefix><rank>".
NCCL_TRACE_PREFIX = "nccl-trace-rank-"

PID_FILE_MAX_BYTES = 1024  # "<pid> <token>": the token is host/job/attempt
_PID_FILE = re.compile(r"rank-(\d+)\.pid")


def stack_file(rank: int) -> str:
    """The rank's dumps, appended one after the other, relative to the run directory."""
    return f"{STACKS_DIR}/rank-{rank}.txt"


def pid_file(rank: int) -> str:
    """ "<pid> <job token>", written once the rank's dump is registered."""
    return f"{STACKS_DIR}/rank-{rank}.pid"


def rank_of_pid_file(name: str) -> int | None:
    """The rank a name under STACKS_DIR is the pid file of; None for any other name."""
    matched = _PID_FILE.fullmatch(name.rsplit("/", 1)[-1])
    return int(matched.group(1)) if matched else None

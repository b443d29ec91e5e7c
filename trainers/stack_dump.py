"""Each rank's stacks on request: faulthandler registered on STACKS_SIGNAL (jobspec/stacks.py says why), its
dumps appended to the rank's file in the run directory, where the worker reads them through the confined
opener. The pid file, written last, tells the worker which process to signal: in the sandbox's pid namespace
the rank knows only its own pid there, which the worker maps through /proc's NSpid."""

from __future__ import annotations

import faulthandler
import os
from pathlib import Path
from typing import TextIO

from jobspec.stacks import JOB_TOKEN_ENV, STACKS_DIR, STACKS_SIGNAL, pid_file, stack_file

# faulthandler writes to this file's descriptor from its signal handler: it stays open for the rank's life.
_dump: list[TextIO] = []


def register_stack_dump(run_dir: Path, rank: int) -> None:
    """From now on STACKS_SIGNAL appends every thread's stack to the rank's file and the rank runs on."""
    (run_dir / STACKS_DIR).mkdir(exist_ok=True)
    dump = _open_appending(run_dir / stack_file(rank))
    # chain=False: the signal's default action would end the rank.
    faulthandler.register(STACKS_SIGNAL, file=dump, all_threads=True, chain=False)
    _dump[:] = [dump]
    token = os.environ.get(JOB_TOKEN_ENV, "")
    with _open_writing(run_dir / pid_file(rank)) as said:
        said.write(f"{os.getpid()} {token}\n")


def _open_appending(path: Path) -> TextIO:
    # O_NOFOLLOW: a link left in the run directory must not turn the dump into a write elsewhere.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "w", encoding="utf-8")


def _open_writing(path: Path) -> TextIO:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "w", encoding="utf-8")

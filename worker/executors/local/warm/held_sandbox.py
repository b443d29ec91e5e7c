"""A job's sandbox, started empty for a warm standby to enter (trainers/warm/enter.py).

bwrap cannot add a mount to a sandbox it has started, and a standby started before its job cannot have been
started inside that job's sandbox. So the worker starts the job's own sandbox, the very command a cold start
would run (core/sandbox.py: the same mounts, namespaces, uid and limits), with a holder in place of torchrun,
and hands the standby descriptors of the holder's namespaces: the standby's child joins them and takes the
same uid, limits and capabilities the command gives the holder. The holder keeps the sandbox up until the
standby closes its stdin; bwrap's stdout reads end-of-file once bwrap and every process of the sandbox are
gone.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
from dataclasses import dataclass
from pathlib import Path

from core.launch import Launch
from core.sandbox import Sandbox, sandbox_argv
from worker.executors.local.warm.priority import niced
from worker.sandbox import PROBE_TIMEOUT_S

NAMESPACES = ("user", "ipc", "net", "mnt", "pid")
# Says it is in place (every mount made, the job's uid taken), then waits for end-of-file on its stdin. The
# cancel's SIGTERM is the job's torchrun's to take: the holder's death would tear the sandbox down.
HOLDER = (
    "import os, signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); os.write(1, b'\\n'); os.read(0, 1)"
)


@dataclass(frozen=True)
class HeldSandbox:
    """A started sandbox and the descriptors the standby needs, by name."""

    bwrap: subprocess.Popen[bytes]
    fds: dict[str, int]


def _ready(bwrap: subprocess.Popen[bytes]) -> bool:
    """Whether the holder said it is in place within PROBE_TIMEOUT_S."""
    assert bwrap.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(bwrap.stdout, selectors.EVENT_READ)
        if not selector.select(PROBE_TIMEOUT_S):
            return False
    return os.read(bwrap.stdout.fileno(), 1) == b"\n"


def hold_sandbox(box: Sandbox, confined: Launch, python: str, cwd: Path, nice: int) -> HeldSandbox | None:
    """Start `box` with the holder in it, as `confined` (the job's command in `box`) would start: its
    environment (the job's mark, so a kill finds bwrap as it would find a cold job's), descriptors and
    priority (`nice`, priority.py). None when it does not come up; the job then starts cold, and says why in
    its own launch."""
    info_read, info_write = os.pipe()
    try:
        bwrap = subprocess.Popen(
            niced([*sandbox_argv(box, info_fd=info_write), python, "-I", "-S", "-c", HOLDER], nice),
            env=confined.env,
            cwd=cwd,
            pass_fds=(*confined.pass_fds, info_write),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        os.close(info_write)
    assert bwrap.stdin is not None and bwrap.stdout is not None
    try:
        if not _ready(bwrap):
            raise OSError("the sandbox's holder did not start")
        # bwrap wrote it before the holder started: its pid 1, as the host numbers it.
        init = json.loads(os.read(info_read, 4096))["child-pid"]
        fds = {name: os.open(f"/proc/{init}/ns/{name}", os.O_RDONLY) for name in NAMESPACES}
    except (OSError, ValueError, KeyError):
        bwrap.kill()
        bwrap.wait()
        return None
    finally:
        os.close(info_read)
    lifeline, ended = os.dup(bwrap.stdin.fileno()), os.dup(bwrap.stdout.fileno())
    bwrap.stdin.close()
    bwrap.stdout.close()
    return HeldSandbox(bwrap, {"lifeline": lifeline, "ended": ended, **fds})


def reap(held: list[HeldSandbox]) -> list[HeldSandbox]:
    """Those of `held` whose bwrap still runs; the others waited for, so none is left a zombie."""
    return [sandbox for sandbox in held if sandbox.bwrap.poll() is None]

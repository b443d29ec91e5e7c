"""An API process on one CPU (TRAINYARD_API_ONE_CPU, which `python -m app.serve` turns on unless it is set).

An API process runs Python in several threads: the event loop, the submissions' write units, the read pool,
the doorbell. Only one holds Python's lock at a time, and a write unit hands it over at every SQLite call.
Where the threads sit on different cores, each hand-over wakes another core, whose caches do not hold what
the request was working on. On one core the same hand-overs cost a switch: a submission, whose write unit
runs on a pool thread, costs the API markedly less CPU, and so do the pages read on the read threads
(bench/RESULTS.md, "Each API process on one CPU"). A request served on the event loop alone gains nothing,
and loses where a busy process of the same priority shares the CPU (a load client on a 2-core box): a job's
ranks run niced (TRAINYARD_RANK_NICE), and a box where that does not hold can turn this off.

Each process claims a CPU of those it may use, the highest numbered first (the first CPUs are where a box's
interrupts and housekeeping usually run), with a lock file per CPU. The kernel releases the lock when the
process goes, however it goes. A process that finds every CPU taken runs where the kernel places it. A
process's threads take the CPU with them: those running when it pins itself (every one in /proc/self/task),
and those it starts later, which inherit it. The forecaster it starts must not: it imports torch and traces
models, and on the API's CPU it would slow every request. It is given the CPUs the process had before
pinning (jobspec/forecast.py's FORECASTER_CPUS_ENV) and takes them back as it starts.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import tempfile
from collections.abc import Iterable, Set
from pathlib import Path

log = logging.getLogger(__name__)

# One folder per user on the host, so the API processes of one box share their claims whatever their
# working directory (a container's may be read-only).
CLAIMS_DIR = Path(tempfile.gettempdir()) / f"trainyard-api-cpus-{os.getuid()}"

_allowed: frozenset[int] | None = None  # what this process might use before it pinned itself
_claim: int | None = None  # the open lock file of its CPU, held while it lives


def process_cpus() -> frozenset[int]:
    """The CPUs this process may use, or might before it kept its threads to one: what its children get."""
    return _allowed if _allowed is not None else frozenset(os.sched_getaffinity(0))


def keep_to_one_cpu() -> int | None:
    """Claim a CPU no other API process of this host holds and move every thread of this one to it; the CPU,
    or None where every one is taken, only one is allowed, or the claims cannot be written."""
    global _allowed, _claim
    if _claim is not None:
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    try:
        _private_claims_dir()
        claimed = _claim_one(reversed(allowed))
    except OSError as exc:
        log.warning("the API process stays on CPUs %s: no claim on one (%s)", _listed(allowed), exc)
        return None
    if claimed is None:
        log.info(
            "every CPU of %s is claimed by an API process; this one runs where the kernel places it",
            _listed(allowed),
        )
        return None
    cpu, _claim = claimed
    _allowed = frozenset(allowed)
    move_threads({cpu})
    log.info("the API process keeps its threads on CPU %d of %s", cpu, _listed(allowed))
    return cpu


def move_threads(cpus: Set[int]) -> None:
    """Every thread of this process, and those it starts later, onto `cpus`: os.sched_setaffinity moves
    only the thread that calls it."""
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def _private_claims_dir() -> None:
    """CLAIMS_DIR, made if missing, and refused (OSError) unless it is a folder of this user's that no one
    else may write: under the shared temporary folder, another user, or a job run unsandboxed as this one,
    could have made it first and planted links in it."""
    CLAIMS_DIR.mkdir(mode=0o700, exist_ok=True)
    found = CLAIMS_DIR.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022:
        raise PermissionError(f"{CLAIMS_DIR} is not a folder of this user's that only it may write")


def _claim_one(cpus: Iterable[int]) -> tuple[int, int] | None:
    # O_NOFOLLOW: a link planted in the folder is refused (OSError), never followed to a file it names.
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    for cpu in cpus:
        descriptor = os.open(CLAIMS_DIR / f"{cpu}.lock", flags, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            continue
        return cpu, descriptor
    return None


def _listed(cpus: list[int]) -> str:
    return ",".join(str(cpu) for cpu in cpus)

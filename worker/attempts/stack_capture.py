"""Every rank's Python stacks, captured by the worker that runs the attempt (on a stall, or asked for by
POST /v1/jobs/{id}/stacks) and kept as the job's latest capture in job_stacks.

Each rank registered a dump on STACKS_SIGNAL and wrote its pid file (trainers/stack_dump.py); the executor
sends the signal to the processes those files name (RunningAttempt.signal_ranks), and the dumps are read back
through the confined opener: the run directory is the job's, so a link planted where a dump should be is not
followed, and a dump is read no further than STACK_MAX_BYTES. The capture blocks its loop's tick for at most
DUMP_WAIT_S while the ranks write."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.db import session_scope
from core.log_mask import masked_text
from core.models import JobStacks, utcnow
from core.upsert import insert_or_update
from jobspec.files import JobFileError, JobFileMissing, job_files, open_job_file
from jobspec.stacks import PID_FILE_MAX_BYTES, STACKS_DIR, rank_of_pid_file, stack_file
from worker.attempts.flight import summary

STACK_MAX_BYTES = (
    64 << 10
)  # one rank's dump: the end is kept, where the innermost frames of the last dump are
RANKS_SHOWN = 64
DUMP_WAIT_S = 3.0
POLL_S = 0.05
REQUESTED = "requested"
# A frame of torch.distributed's collectives, as faulthandler writes it: File "…/distributed_c10d.py", line
# 2806 in all_reduce.
_COLLECTIVE = re.compile(
    r'distributed_c10d\.py", line \d+ in (all_reduce|all_gather\w*|reduce_scatter\w*|broadcast\w*|barrier|'
    r"monitored_barrier|reduce|all_to_all\w*|gather\w*|scatter\w*|send|recv)\b"
)


@dataclass(frozen=True)
class RankPid:
    """What a rank's pid file says: its pid as it sees it (inside the sandbox's pid namespace: the executor
    maps it) and its attempt's job token."""

    pid: int
    token: str


@dataclass(frozen=True)
class Capture:
    ranks: list[dict[str, Any]]  # [{"rank", "host", "stack"}]
    collectives: list[dict[str, Any]]
    message: str | None  # what could not be read, and why

    def waiting(self) -> dict[int, str]:
        """The ranks whose stack is in a collective call, and the call."""
        inside = {rank["rank"]: _COLLECTIVE.search(rank["stack"]) for rank in self.ranks}
        return {rank: found.group(1) for rank, found in inside.items() if found is not None}


def rank_pids(run_dir: Path) -> dict[int, RankPid]:
    """The ranks' pid files in the run directory, the first RANKS_SHOWN ranks; a file that is refused or
    says something else is left out."""
    try:
        names = job_files(run_dir, STACKS_DIR, deep=False)
    except JobFileError:
        return {}
    ranks = sorted((rank, name) for name in names if (rank := rank_of_pid_file(name)) is not None)
    found: dict[int, RankPid] = {}
    for rank, name in ranks[:RANKS_SHOWN]:
        try:
            with open_job_file(run_dir, name, PID_FILE_MAX_BYTES) as opened:
                said = opened.file.read(PID_FILE_MAX_BYTES).decode(errors="replace").split()
        except JobFileError:
            continue
        if len(said) == 2 and said[0].isdigit():
            found[rank] = RankPid(int(said[0]), said[1])
    return found


def dump_size(run_dir: Path, rank: int) -> int | None:
    """The size of the rank's dump file now: 0 before its first dump; None when it is refused."""
    try:
        with open_job_file(run_dir, stack_file(rank), None) as opened:
            return opened.size
    except JobFileMissing:
        return 0
    except JobFileError:
        return None


def read_dump(run_dir: Path, rank: int, start: int) -> str | None:
    """What the rank's file gained after `start` (its last STACK_MAX_BYTES); None when it is refused."""
    try:
        with open_job_file(run_dir, stack_file(rank), None) as opened:
            start = start if opened.size >= start else 0  # the job cut its file short meanwhile
            opened.file.seek(max(start, opened.size - STACK_MAX_BYTES))
            return opened.file.read(min(opened.size - start, STACK_MAX_BYTES)).decode(errors="replace")
    except JobFileError:
        return None


def wait_for_dumps(run_dir: Path, before: dict[int, int]) -> None:
    """Until each signalled rank's file grew and stopped growing, or DUMP_WAIT_S passed: a rank whose
    signal never arrives (it exited, or took the signal over) must not hold the loop."""
    deadline = time.monotonic() + DUMP_WAIT_S
    last: dict[int, int | None] = {}
    while time.monotonic() < deadline:
        now = {rank: dump_size(run_dir, rank) for rank in before}
        if now == last and all((size or 0) > before[rank] for rank, size in now.items()):
            return
        last = now
        time.sleep(POLL_S)


SignalRanks = Callable[[dict[int, RankPid]], list[int]]


def capture_ranks(
    run_dir: Path, host: str, signal_ranks: SignalRanks, secrets: Sequence[str] = ()
) -> Capture:
    """Signal the ranks (`signal_ranks`: the executor's RunningAttempt.signal_ranks) and read their dumps,
    the values of `secrets` masked: a dump is the job's own file, and may say anything."""
    pids = rank_pids(run_dir)
    before = {rank: size for rank in pids if (size := dump_size(run_dir, rank)) is not None}
    signalled: list[int] = signal_ranks({rank: pids[rank] for rank in before})
    collectives = summary(run_dir)
    if not signalled:
        why = "no rank of this attempt could be signalled from this worker"
        return Capture([], collectives, why if pids else "no rank has registered its stack dump yet")
    wait_for_dumps(run_dir, {rank: before[rank] for rank in signalled})
    ranks, unread = [], []
    for rank in sorted(signalled):
        stack = read_dump(run_dir, rank, before[rank])
        if stack:
            ranks.append({"rank": rank, "host": host, "stack": masked_text(stack, secrets)})
        else:
            unread.append(rank)
    said = f"ranks {_listed(unread)} wrote no stack in {DUMP_WAIT_S:g} s" if unread else None
    return Capture(ranks, collectives, said)


def store(job_id: int, reason: str, capture: Capture) -> None:
    """The job's latest capture, in a transaction of its own, never a transition's."""
    with session_scope() as session:
        row = {
            "job_id": job_id,
            "captured_at": utcnow(),
            "reason": reason,
            "ranks": capture.ranks,
            "collectives": capture.collectives,
            "message": capture.message,
        }
        insert_or_update(session, JobStacks, row, ["job_id"])


def stalled_message(still_s: float, limit_s: float, capture: Capture, job_id: int) -> str:
    """The stall as the job's message says it: where the ranks that could be told wait, and those that did
    not arrive (gloo: a rank whose stack is not in a collective call, while others' are)."""
    said = f"no step for {still_s:.0f} s (stall limit {limit_s:.0f} s, limits.stall_timeout_s)"
    where = f"every rank's stack: trainyard stacks {job_id}"
    waiting = capture.waiting()
    if missing := [c for c in capture.collectives if c["missing"]]:
        first = missing[0]
        said += f"; ranks {_listed(first['missing'])} did not arrive in {first['collective']}"
    elif waiting and (late := [r["rank"] for r in capture.ranks if r["rank"] not in waiting]):
        calls = ", ".join(sorted(set(waiting.values())))
        said += f"; ranks {_listed(late)} did not arrive: ranks {_listed(sorted(waiting))} wait in {calls}"
    elif not capture.ranks:
        where = f"no stacks: {capture.message}"
    return f"{said}; {where}"


def _listed(ranks: list[int]) -> str:
    return ", ".join(str(rank) for rank in ranks)

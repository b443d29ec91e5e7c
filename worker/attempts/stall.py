"""limits.stall_timeout_s: when a running attempt has stalled, judged the same way whichever executor runs
it, from its step counter (jobs.progress_step, which its events advance) as each look reads it, and the time.

A step counter advances every metrics.every_n_steps (a program's reports), so the rule's "step time" is the
time between two advances the worker saw: 20 of them, and never less than STALL_FLOOR_S. Until the first
advance the attempt is starting (imports, the ranks meeting, data, a compile), which takes as long as it
takes on a busy host (minutes, where 2 cores are shared): the start-up allowance then, counted from the
attempt's first look, which a longer stall_timeout_s extends; a set value applies from the first advance.
For an NCCL job the rule waits past its collective timeout and the flight recorder's dump
(flight_dump_floor)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from statistics import median

from sqlalchemy import select

from core.config import Settings
from core.db import session_scope
from core.models import Job
from jobspec.spec import JobSpec

STALL_FLOOR_S = 600.0
STEP_TIMES = 20
GAPS_KEPT = 64  # the median of the latest advances: the work per look stays flat over a long job
# NCCL's watchdog, once a collective timed out, signals every rank to dump: on 2 H200s the dumps were written
# within a second (tests/gpu/test_stall_nccl_gpu.py); a minute leaves room for a large job's.
FLIGHT_DUMP_S = 60.0


def flight_dump_floor(backend: str | None, collective_timeout_s: float) -> float:
    """For an NCCL job, when the rule may call a stall at the earliest: after its collective timeout and the
    dump it sets off, so that the capture holds torch's flight recorder, which alone names the rank missing
    from a collective (NCCL's calls return to Python at once, so no rank's stack shows it). The rule's clock
    starts at the last step, before the hung collective was issued, and with both at 10 minutes it called the
    stall before NCCL's watchdog had dumped. A limits.stall_timeout_s set by the user is taken as set."""
    return collective_timeout_s + FLIGHT_DUMP_S if backend == "nccl" else 0.0


def startup_allowance(settings: Settings) -> float:
    """How long an attempt may take to start before its stall is told: TRAINYARD_SLURM_STARTUP_S, the
    allowance Slurm's --time already gives start-up (core/slurm_script.py), and at least STALL_FLOOR_S."""
    return max(STALL_FLOOR_S, float(settings.slurm_startup_s))


@dataclass
class StallWatch:
    """One attempt's step counter as the looks saw it. `timeout_s` is limits.stall_timeout_s (None: the
    rule); monotonic seconds throughout."""

    timeout_s: float | None
    allowance_s: float
    since: float = field(default_factory=time.monotonic)  # the last advance, or the first look
    progress: Hashable | None = None  # what the latest look saw of it (stalled_for)
    advanced: bool = False
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=GAPS_KEPT))
    # The rule's least, past the job's collective timeout for NCCL (see flight_dump_floor); 0: none.
    floor_s: float = 0.0

    @classmethod
    def for_job(cls, job_id: int, settings: Settings) -> StallWatch:
        with session_scope() as session:
            row = session.execute(select(Job.spec, Job.plan).where(Job.id == job_id)).first()
        if row is None:
            return cls(None, startup_allowance(settings))
        limits = JobSpec.model_validate(row.spec).limits
        timeout = None if limits.stall_timeout_s is None else float(limits.stall_timeout_s)
        floor = flight_dump_floor((row.plan or {}).get("backend"), limits.collective_timeout_s)
        return cls(timeout, startup_allowance(settings), floor_s=floor)

    def limit_s(self) -> float:
        """How long the counter may stand still now."""
        if not self.advanced:
            return max(self.allowance_s, self.timeout_s or 0.0)
        if self.timeout_s is not None:
            return self.timeout_s
        if not self.gaps:  # one advance: no step time known yet
            return self.allowance_s
        return max(STALL_FLOOR_S, STEP_TIMES * median(self.gaps), self.floor_s)

    def stalled_for(self, progress: Hashable, now: float | None = None) -> float | None:
        """Seconds the attempt's `progress` (its step counter, and whether this attempt took its first step:
        a resumed attempt reports the steps an earlier one had counted) has stood still, once past the limit;
        None while the attempt may run on."""
        now = time.monotonic() if now is None else now
        if self.progress is None:
            self.progress = progress  # an earlier attempt's count: only a change is news
        elif progress != self.progress:
            if self.advanced:  # the gap to the first advance is start-up, not a step
                self.gaps.append(now - self.since)
            self.advanced, self.progress, self.since = True, progress, now
        still = now - self.since
        return still if still >= self.limit_s() else None

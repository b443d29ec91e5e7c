"""limits.stall_timeout_s: when a running attempt has stalled, judged the same way whichever executor runs
it, from its step counter (jobs.progress_step, which its events advance) as each look reads it, and the time.

A step counter advances every metrics.every_n_steps (a program's reports), so the rule's "step time" is the
time between two advances the worker saw: 20 of them, and never less than STALL_FLOOR_S. Until the first
advance the attempt is starting (imports, the ranks meeting, data, a compile), which takes as long as it
takes on a busy host (minutes, where 2 cores are shared): the start-up allowance then, counted from the
attempt's first look, which a longer stall_timeout_s extends; a set value applies from the first advance."""

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

    @classmethod
    def for_job(cls, job_id: int, settings: Settings) -> StallWatch:
        with session_scope() as session:
            spec = session.scalar(select(Job.spec).where(Job.id == job_id))
        timeout = None if spec is None else JobSpec.model_validate(spec).limits.stall_timeout_s
        return cls(None if timeout is None else float(timeout), startup_allowance(settings))

    def limit_s(self) -> float:
        """How long the counter may stand still now."""
        if not self.advanced:
            return max(self.allowance_s, self.timeout_s or 0.0)
        if self.timeout_s is not None:
            return self.timeout_s
        if not self.gaps:  # one advance: no step time known yet
            return self.allowance_s
        return max(STALL_FLOOR_S, STEP_TIMES * median(self.gaps))

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

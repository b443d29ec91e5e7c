"""Fair share: each user's recent use of the cluster, charged by the workers' heartbeats
(worker/executors/local/telemetry.py) and halved every fair_share_half_life_s, which orders equal priorities
in the queue (core/queue_order.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from core.clock import as_utc
from core.config import Settings
from core.models import UserUsage

# The share key of a user with no use yet: before any user with some.
NO_USE = -1e12


@dataclass(frozen=True)
class Use:
    gpu_seconds: float
    cpu_core_seconds: float

    def weighted(self, settings: Settings) -> float:
        return self.gpu_seconds + settings.fair_share_cpu_weight * self.cpu_core_seconds


def use_now(row: UserUsage, now: datetime, settings: Settings) -> Use:
    """The row's use decayed from its as_of to `now` (a clock behind as_of decays nothing)."""
    elapsed = max((now - as_utc(row.as_of)).total_seconds(), 0.0)
    factor = 0.5 ** (elapsed / settings.fair_share_half_life_s)
    return Use(row.gpu_seconds * factor, row.cpu_core_seconds * factor)


def share_key(use: Use, at: datetime, settings: Settings) -> float:
    """log2(use at `at`) + `at` in half-lives: the same for every later moment, since the use halves as the
    second term grows by one. Ordering by it is ordering by use now, for users charged at different times."""
    weighted = use.weighted(settings)
    if weighted <= 0:
        return NO_USE
    return math.log2(weighted) + at.timestamp() / settings.fair_share_half_life_s

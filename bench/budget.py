"""Wall-clock budgets: a device command may run 10 minutes, so every script stops starting work in time.

No torch import: the parents use it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# Below this, a variant cannot even start a process and import torch: better recorded as skipped.
MIN_USEFUL_S = 20.0


@dataclass
class Budget:
    seconds: float
    started: float = field(default_factory=time.monotonic)

    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def timeout(self, cap: float) -> float | None:
        """The time one variant may take: its own cap, or what is left; None when too little is left."""
        left = self.remaining()
        return min(cap, left) if left >= MIN_USEFUL_S else None

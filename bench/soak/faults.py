"""The kill schedule: seeded random times over the soak's window, each kind of process at least once, and a
thread that makes the kills and logs each one (time, target, pid) as it happens."""

from __future__ import annotations

import random
import sys
import threading
import time
from dataclasses import asdict, dataclass

from bench.soak.stack import SoakStack, Target

KILLS_PER_MINUTE = 1.5
# Kills fall between these fractions of the window: the load is up before the first, and the service has
# time to recover from the last before the load stops.
WINDOW = (0.1, 0.85)
# A kill that finds nothing to hit (no job running, no standby waiting) looks again this often, this long.
RETRY_S, RETRY_FOR_S = 2.0, 30.0


@dataclass(frozen=True)
class Fault:
    at_s: float
    target: Target


@dataclass(frozen=True)
class Kill:
    at_s: float
    target: str
    pid: int | None
    detail: str
    # When the kill returned: a process is dead, or started again; PostgreSQL accepts connections again
    # (pg_ctl's restart waits for it).
    back_s: float


def schedule(seed: int, duration_s: float, targets: tuple[Target, ...]) -> list[Fault]:
    """KILLS_PER_MINUTE on average, every target at least once; PostgreSQL exactly once: a restart fails
    every connection of every process at once, an event to survive, not a weather."""
    rng = random.Random(seed)
    count = max(len(targets), round(duration_s / 60 * KILLS_PER_MINUTE))
    repeatable = [target for target in targets if target is not Target.POSTGRES]
    chosen = [*targets, *(rng.choice(repeatable) for _ in range(count - len(targets)))]
    rng.shuffle(chosen)
    times = sorted(rng.uniform(*WINDOW) * duration_s for _ in chosen)
    return [Fault(round(at, 1), target) for at, target in zip(times, chosen, strict=True)]


class Faults(threading.Thread):
    def __init__(self, stack: SoakStack, plan: list[Fault], seed: int, started: float) -> None:
        super().__init__(name="soak-faults", daemon=True)
        self.stack, self.plan, self.started = stack, plan, started
        self.rng = random.Random(seed + 1)  # the victims: apart from the schedule's draws
        self.kills: list[Kill] = []
        self.abandoned = threading.Event()

    def run(self) -> None:
        for fault in self.plan:
            if self.abandoned.wait(max(0.0, self.started + fault.at_s - time.monotonic())):
                return
            self._log(self._hit(fault.target))

    def _hit(self, target: Target) -> Kill:
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            at_s = time.monotonic() - self.started
            try:
                killed = self.stack.kill(target, self.rng)
            except Exception as error:  # a failed kill or restart is a finding, not the end
                return self._kill(at_s, target, None, f"failed: {type(error).__name__}: {error}")
            if killed is not None:
                return self._kill(at_s, target, killed.pid, killed.detail)
            if time.monotonic() > deadline:
                return self._kill(at_s, target, None, "nothing to kill: none was running")
            time.sleep(RETRY_S)

    def _kill(self, at_s: float, target: Target, pid: int | None, detail: str) -> Kill:
        return Kill(round(at_s, 1), target, pid, detail, round(time.monotonic() - self.started, 1))

    def _log(self, kill: Kill) -> None:
        self.kills.append(kill)
        what = f"pid {kill.pid} ({kill.detail}; back at {kill.back_s:.1f}s)"
        print(f"soak: {kill.at_s:7.1f}s kill {kill.target}: {what}", file=sys.stderr)

    def finish(self) -> None:
        """Waits for the plan's last kill: one delayed past the window by a slow return before it (a worker
        started again on a loaded box) is still made, so that every target is hit."""
        self.join()

    def abandon(self) -> None:
        """No kill after this one: a soak that failed stops its service, and a worker killed and started again
        behind that stop would outlive it."""
        self.abandoned.set()
        if self.is_alive():
            self.join()

    def records(self) -> list[dict[str, object]]:
        return [asdict(kill) for kill in self.kills]

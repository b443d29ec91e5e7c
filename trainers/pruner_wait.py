"""Rank 0's side of the pruner's gate (jobspec/pruner_gate.py): a trial never trains more than GATE_LAG_S
past a report of its sweep's objective that its worker has not judged yet. A worker that keeps up costs the
trial nothing (a trial reporting its objective at every step runs at full speed); one that falls behind, on
a busy host, holds the trial at its next report until the verdict comes, so a trial the pruner gives up on
stops within about GATE_LAG_S of the report that condemned it, however busy the host."""

from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path

from pydantic import ValidationError

from jobspec.pruner_gate import GATE_DIR, GATE_FILE, GATE_LAG_S, GATE_POLL_S, GATE_WAIT_S, PrunerGate
from trainers.dist_env import StopRequest

log = logging.getLogger(__name__)


class GateWait:
    """Every rank holds one; only rank 0's waits (the others wait for it at their next collective)."""

    def __init__(self, run_dir: Path, enabled: bool, stop: StopRequest | None) -> None:
        self.path = run_dir / GATE_DIR / GATE_FILE
        self.enabled = enabled
        self.stop = stop  # a SIGTERM (cancel, runtime limit) ends a wait: the stop needs the time
        self.unjudged: deque[tuple[int, float]] = deque()  # (step, when) of objective reports not judged

    def after_report(self, step: int, values: dict[str, float]) -> None:
        """At every report, whatever it holds: the trial's last chance to stop before it trains on."""
        if not self.enabled or (gate := self._read()) is None:
            return
        if gate.metric in values:
            self.unjudged.append((step, time.monotonic()))
        deadline = time.monotonic() + GATE_WAIT_S
        while self._behind(gate):
            if self.stop is not None and self.stop.requested:
                return
            if time.monotonic() > deadline:
                log.warning("step %s: no verdict of the pruner in %gs; training on", step, GATE_WAIT_S)
                self.unjudged.clear()
                return
            time.sleep(GATE_POLL_S)
            gate = self._read() or gate

    def _behind(self, gate: PrunerGate) -> bool:
        """Whether an objective report older than GATE_LAG_S is still unjudged."""
        while self.unjudged and self.unjudged[0][0] <= gate.judged:
            self.unjudged.popleft()
        return bool(self.unjudged) and time.monotonic() - self.unjudged[0][1] > GATE_LAG_S

    def _read(self) -> PrunerGate | None:
        """The gate as the worker last wrote it; None for a job that is no pruned trial."""
        try:
            return PrunerGate.model_validate_json(self.path.read_bytes())
        except (OSError, ValidationError):
            return None

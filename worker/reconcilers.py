"""What follows a state change, done after it: a change only records facts in its transaction (a trial ended,
so its sweep's `trials_due`); this thread, in every worker whatever its executor, acts on them outside any
write, idempotently, so a repeated or interrupted pass changes nothing twice. Today it asks for sweeps' next
trials (core/sweeps/asks.py::top_up), which runs Optuna and plans jobs: never inside the change that ended a
trial, which holds SQLite's one writer for everyone; and it releases or cancels the dependants of ended jobs
(core/dependencies.py)."""

from __future__ import annotations

import logging
import threading

from core.config import get_settings
from core.dependencies import reconcile_dependencies
from core.doorbell import EXIT_DRAIN_S, drain_rings
from core.sweeps.asks import reconcile_sweeps

log = logging.getLogger(__name__)


class ReconcilerThread(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="trainyard-reconcilers", daemon=True)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for reconcile in (reconcile_sweeps, reconcile_dependencies):
                try:
                    reconcile()
                except Exception:  # a bad pass (database away) must not end reconciling for good
                    log.exception("reconciler pass failed: %s", reconcile.__name__)
            self.halt.wait(get_settings().reconcile_s)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)
        # The rings for the dependants and trials of its last pass (the reaper would ring for them later).
        drain_rings(EXIT_DRAIN_S)

"""The lease of one node of one attempt, renewed on a thread that does nothing else but meter the job after
each renewal (worker/executors/local/telemetry.py: its owner's fair-share use and its GPUs' telemetry).

The reaper requeues a job whose heartbeat is older than lease_timeout_s. The supervisor's loop tails events
into SQL and waits for uploads at a job's end, either of which may take longer than that; the heartbeat runs
beside it, so only a dead worker (or a database it cannot reach) lets the lease expire.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from core.config import get_settings
from core.db import session_scope
from core.models import utcnow
from worker.attempts.ends import own
from worker.executors.local.nodes import NodeTask, beat_node
from worker.executors.local.telemetry import JobMeter

log = logging.getLogger(__name__)


class Heartbeat:
    """Beats every `every_s` while its `with` block runs; once the attempt is no longer this worker's the
    write matches no row, and the supervisor's own look at the job stops it."""

    def __init__(self, node: NodeTask, every_s: float) -> None:
        self.node = node
        self.every_s = every_s
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"heartbeat-job-{node.job_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.halt.set()
        self.thread.join()  # at most one write in flight, which the database's lock timeout bounds

    def _run(self) -> None:
        meter = JobMeter(self.node, get_settings())
        while True:
            try:
                with session_scope() as session:  # blocks only on the database's own lock
                    owned = own(session, self.node.job_id, self.node.attempt)
                    beat_node(session, self.node)
                if owned:
                    meter.beat(utcnow())
            except Exception:  # a locked or unreachable database: one failed beat must not end them all
                log.exception("job %s: heartbeat failed", self.node.job_id)
            if self.halt.wait(self.every_s):
                return

"""An attempt's events into SQL, whichever executor runs it: the ranks write `events.jsonl` in the run
directory (on the shared filesystem under Slurm), and the worker tails it into rows, its checkpoints through
the job's uploads, under the job's metric caps, with a sweep's trial judged by its pruner."""

from __future__ import annotations

from pathlib import Path

from core.config import Settings, get_settings
from core.db import session_scope
from core.states import JobStatus
from jobspec.events import EVENTS_FILE, PhaseEvent, StartupEvent, WarningEvent
from worker.attempts.ends import Outcome
from worker.attempts.stall import StallWatch
from worker.metric_caps import MetricCounts
from worker.pruning import TrialPruning
from worker.tail import EventTail, apply_events, pump
from worker.uploads import Uploads


def catch_up(job_id: int, run_dir: Path, uploads: Uploads, settings: Settings) -> EventTail:
    """Record what earlier attempts wrote after their worker died (their processes train on until the reaper
    stops them: checkpoints come and go), so the next attempt resumes from a checkpoint that still exists.

    Re-reading is idempotent; only phase, start-up and warning events are skipped, as they speak of an
    earlier attempt. Returns a tail at the end of the file, for this attempt's events, once their checkpoints
    are stored (or upload_drain_s has passed, and the attempt resumes from an older one).
    """
    tail = EventTail(run_dir / EVENTS_FILE)
    counts = MetricCounts.from_settings()  # counted once, not per batch
    while True:
        start = tail.offset
        events = [
            event for event in tail.read() if not isinstance(event, PhaseEvent | StartupEvent | WarningEvent)
        ]
        if events:
            with session_scope() as session:
                apply_events(session, job_id, events, uploads, counts)
        if tail.offset == start:
            uploads.settle(settings.upload_drain_s)
            return tail


class AttemptEvents:
    """One attempt's events as they come. `tail` is None where another node reads the shared file; the
    uploads may outlive the attempt (the local executor keeps them across restarts on one host)."""

    def __init__(self, job_id: int, tail: EventTail | None, uploads: Uploads) -> None:
        self.job_id = job_id
        self.tail = tail
        self.uploads = uploads
        self.counts = MetricCounts.from_settings()  # read from the table at the first batch only
        # A sweep's trial, judged by its pruner where its events are tailed.
        self.pruning = TrialPruning.for_job(job_id, tail.path.parent) if tail is not None else None
        # Judged at the first look (a verdict kept from an earlier attempt) and after new reports of the
        # objective, not at every look: a pruned trial's attempt is looked at often.
        self.judge_next = True
        self.stall = StallWatch.for_job(job_id, get_settings())

    def pump(self, *, drain: bool = False) -> bool:
        """New events (all of them with `drain`) into SQL; True if there were any."""
        if self.tail is None:
            return False
        new = pump(self.tail, self.job_id, self.uploads, self.counts, drain=drain)
        self.judge_next |= self.pruning is not None and self.pruning.has_news(new)
        return bool(new)

    def pruned(self) -> Outcome | None:
        """The pruner's verdict on a sweep's trial, when there is news to judge; a database error leaves it
        to judge again at the next look."""
        if self.pruning is None or not self.judge_next:
            return None
        why = self.pruning.verdict()
        self.judge_next = False
        return None if why is None else Outcome(JobStatus.PRUNED, "pruned", why)

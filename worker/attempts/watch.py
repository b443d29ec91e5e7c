"""A running attempt, whichever executor runs it, and what every executor's loop decides about one the same
way: why it must stop, and, once its processes are gone, how it settles and then restarts or ends.

Each executor keeps its own reasons around these: the local one its worker's shutdown, a preemption, the disk
limit and a multi-node job's other nodes; the Slurm one a requeue by Slurm."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

from core.config import Settings
from core.states import JobStatus
from worker.attempts.deadline import Attempt, Look, past_deadline
from worker.attempts.ends import CANCELLED, Outcome, finish
from worker.attempts.events import AttemptEvents

log = logging.getLogger(__name__)


class RunningAttempt(Attempt, Protocol):
    """An attempt whose processes were launched (local) or submitted (Slurm), as its executor follows it.
    worker/executors/api.py names it among what an executor must provide; it is defined here, where the
    decisions below read it, as worker/attempts/ imports no executor."""

    @property
    def events(self) -> AttemptEvents:
        """Its events, streaming into SQL with its uploads."""
        ...

    @property
    def max_restarts(self) -> int: ...

    def ended(self) -> Outcome | None:
        """How its processes ended; None while they run."""
        ...

    def stop(self, outcome: Outcome) -> None:
        """Ask its processes to stop (a signal, time for a last checkpoint, then a kill) and end as
        `outcome`, whatever their exit says."""
        ...

    def restart(self, outcome: Outcome) -> bool:
        """A retryable failure: start again from the latest checkpoint if limits.max_restarts allows; False
        when none is left."""
        ...


def must_stop(attempt: RunningAttempt, seen: Look) -> Outcome | None:
    """Why a running attempt must stop, from its `look`: cancelled on request, its sweep's pruner gave up on
    it, or it ran past its deadline; None while it may run on."""
    if seen.status is JobStatus.CANCELLING:
        return CANCELLED
    return attempt.events.pruned() or past_deadline(seen, attempt)


def settle(attempt: RunningAttempt, settings: Settings) -> None:
    """Its processes are gone: their last events into SQL, the checkpoints among them, and its uploads
    stored (up to upload_drain_s) before the job is seen to end: a restart resumes from the newest
    checkpoint, and a reader's eof means the full log."""
    attempt.events.pump(drain=True)
    attempt.events.uploads.settle(settings.upload_drain_s)


def wind_up(attempt: RunningAttempt, outcome: Outcome, settings: Settings) -> Outcome | None:
    """Settle an attempt whose processes are gone, then restart a retryable failure while restarts remain;
    else close its uploads and return how it ends, saying what could not be stored. None when it restarted,
    its uploads left open for the next attempt."""
    settle(attempt, settings)
    if outcome.retryable:
        if attempt.restart(outcome):
            log.info("job %s attempt %s: restarting (%s)", attempt.job_id, attempt.attempt, outcome.reason)
            return None
        if attempt.max_restarts:
            used_up = f"all {attempt.max_restarts} restarts used"
            outcome = replace(outcome, message=f"{outcome.message} ({used_up})")
    if not_stored := attempt.events.uploads.close():
        log.warning("job %s attempt %s: not stored: %s", attempt.job_id, attempt.attempt, not_stored)
        wait = f"uploads wait up to TRAINYARD_UPLOAD_DRAIN_S={settings.upload_drain_s:g} s"
        late = f"not in the object store when it ended: {', '.join(not_stored)} ({wait})"
        outcome = replace(outcome, message=f"{outcome.message}; {late}")
    return outcome


def record_end(attempt: RunningAttempt, outcome: Outcome) -> bool:
    """The attempt's end in SQL (worker/attempts/ends.py::finish); False when it was not this attempt's."""
    if not finish(attempt.job_id, attempt.attempt, outcome):
        return False
    log.info("job %s attempt %s: %s (%s)", attempt.job_id, attempt.attempt, outcome.status, outcome.reason)
    return True

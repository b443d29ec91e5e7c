"""A running attempt, whichever executor runs it, and what every executor's loop decides about one the same
way: why it must stop, and, once its processes are gone, how it settles and then restarts or ends.

Each executor keeps its own reasons around these: the local one its worker's shutdown, a preemption, the disk
limit and a multi-node job's other nodes; the Slurm one a requeue by Slurm."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

from core.config import Settings, get_settings
from core.states import JobStatus
from worker.attempts.deadline import Attempt, Look, past_deadline
from worker.attempts.ends import CANCELLED, STALLED, Outcome, finish
from worker.attempts.events import AttemptEvents
from worker.attempts.stack_capture import REQUESTED, Capture, RankPid, capture_ranks, stalled_message, store

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

    @property
    def secret_values(self) -> tuple[str, ...]:
        """The values of the job's secrets its ranks were given, masked in what the worker quotes of them."""
        ...

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

    def signal_ranks(self, ranks: dict[int, RankPid]) -> list[int]:
        """Send STACKS_SIGNAL to each rank whose pid file is one of this attempt's processes the executor
        reaches; the ranks signalled (none under Slurm, whose ranks run on other nodes)."""
        ...


def must_stop(attempt: RunningAttempt, seen: Look) -> Outcome | None:
    """Why a running attempt must stop, from its `look`: cancelled on request, its sweep's pruner gave up on
    it, it ran past its deadline, or it stalled (its stacks captured first); None while it may run on. A
    capture of its stacks asked for meanwhile is taken on the way."""
    if seen.status is JobStatus.CANCELLING:
        return CANCELLED
    if (stop := attempt.events.pruned() or past_deadline(seen, attempt)) is not None:
        return stop
    if seen.stacks_asked:
        store(attempt.job_id, REQUESTED, capture(attempt))
    return stalled(attempt, seen)


def capture(attempt: RunningAttempt) -> Capture:
    """The stacks of the attempt's ranks that this worker reaches."""
    run_dir = attempt.events.uploads.run_dir
    return capture_ranks(run_dir, get_settings().hostname, attempt.signal_ranks, attempt.secret_values)


def stalled(attempt: RunningAttempt, seen: Look) -> Outcome | None:
    """A stall (worker/attempts/stall.py) ends the attempt as a retryable failure once its stacks are kept;
    the message names the ranks that did not arrive, where their stacks tell."""
    watch = attempt.events.stall
    still = watch.stalled_for((seen.first_step_done, seen.step))
    if still is None:
        return None
    taken = capture(attempt)
    store(attempt.job_id, STALLED, taken)
    log.warning("job %s attempt %s: stalled for %.0f s", attempt.job_id, attempt.attempt, still)
    said = stalled_message(still, watch.limit_s(), taken, attempt.job_id)
    return Outcome(JobStatus.FAILED, STALLED, said, retryable=True)


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

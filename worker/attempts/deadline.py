"""limits.max_runtime_s: when an attempt runs out of time, read from SQL so that every node of it agrees, and
what the job then ends as, whichever executor runs it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlalchemy import select

from core.clock import as_utc
from core.db import session_scope
from core.models import Job, JobStacks, utcnow
from core.states import JobStatus
from jobspec.startup import Mark
from worker.attempts.ends import OWNED, Outcome
from worker.tail import attempt_marks


class Attempt(Protocol):
    """What the deadline needs of a running attempt (the local executor's RunningJob and the Slurm executor's
    Followed are two)."""

    @property
    def job_id(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def started_at(self) -> datetime | None: ...  # when the job was placed
    @property
    def max_runtime_s(self) -> int | None: ...


def runtime_deadline(
    started_at: datetime | None,
    max_runtime_s: int | None,
    launched: float | None = None,
    running_at: datetime | None = None,
) -> datetime | None:
    """max_runtime_s after the job was placed, plus, once the attempt runs, the time from its launch (epoch
    seconds) to its first step: the limit counts training, not start-up. Until that first step a start-up
    that hangs still times out."""
    if started_at is None or max_runtime_s is None:
        return None
    deadline = as_utc(started_at) + timedelta(seconds=max_runtime_s)
    if launched is None or running_at is None:
        return deadline
    return deadline + (as_utc(running_at) - datetime.fromtimestamp(launched, UTC))


@dataclass(frozen=True)
class Look:
    """The attempt as SQL holds it now."""

    status: JobStatus
    deadline: datetime | None
    # What the stall watch reads (worker/attempts/stall.py): the job's step counter, and whether this attempt
    # took its first step, as a resumed attempt may report the steps an earlier one had counted.
    step: int
    first_step_done: bool
    stacks_asked: bool  # POST /v1/jobs/{id}/stacks asked for a capture since the latest
    reason: str | None = None  # why it is in this status: a preemption's, or a drained GPU's


def look(job: Attempt) -> Look | None:
    """The attempt's status and runtime deadline; None once the attempt is no longer ours. Node 0 marks the
    launch and its tail the first step (running_at); the other nodes, which have no tail, read both here."""
    columns = (Job.status, Job.status_reason, Job.attempt, Job.running_at, Job.timings, Job.progress_step)
    asked = (JobStacks.requested_at, JobStacks.captured_at)
    with session_scope() as session:
        query = select(*columns, *asked).outerjoin(JobStacks).where(Job.id == job.job_id)
        row = session.execute(query).first()
    if row is None or row.attempt != job.attempt or row.status not in OWNED:
        return None
    marks = attempt_marks(row.timings, job.attempt)
    launched = marks.get(Mark.LAUNCHED)
    deadline = runtime_deadline(job.started_at, job.max_runtime_s, launched, row.running_at)
    stacks_asked = row.requested_at is not None and (
        row.captured_at is None or row.requested_at > row.captured_at
    )
    stepped = Mark.FIRST_STEP_DONE in marks
    step = row.progress_step or 0
    return Look(JobStatus(row.status), deadline, step, stepped, stacks_asked, row.status_reason)


def past_deadline(seen: Look, job: Attempt) -> Outcome | None:
    """How the attempt ends once it ran past its deadline; None while it has time left."""
    if seen.deadline is None or utcnow() < seen.deadline:
        return None
    return Outcome(JobStatus.TIMED_OUT, "max_runtime", f"ran past limits.max_runtime_s={job.max_runtime_s}")

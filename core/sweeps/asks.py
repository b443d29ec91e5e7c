"""A sweep's next trials, asked for after the change that calls for them (a sweep made, a trial ended) has
committed: by the API right after it makes a sweep, and by every worker's reconciler for each sweep marked
`trials_due` (worker/reconcilers.py). Optuna's ask and the trial's planning take their time, so they run on
what a read saw, outside any write; the trial and its job are then recorded in one short write, and only if
no other asker recorded that trial number meanwhile. So a repeated or concurrent pass makes nothing twice,
and nothing slow holds SQLite's one writer (issue 42). Optuna itself is in core/sweeps/study.py, imported
only when a sweep is asked something (it takes most of a second to import)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core.config import get_settings
from core.db import session_scope
from core.doorbell import ring_soon
from core.due import settle_due
from core.launch import show_planned
from core.models import Job, JobEvent, Sweep, SweepTrial, utcnow
from core.quotas import job_room
from core.states import JobStatus, SweepStatus, TrialState
from core.sweeps.rows import reported, trials_of
from core.sweeps.spec import SweepSpec, config, trial_spec
from jobspec.plan import Plan, resolve_plan
from jobspec.problems import SpecError
from jobspec.spec import JobSpec

if TYPE_CHECKING:
    from core.sweeps.study import TrialRecord


# Sweeps one reconciler pass looks at; the rest wait for the next pass.
DUE_PER_PASS = 64


def trial_name(sweep: Sweep, number: int) -> str:
    return f"{sweep.name}-trial-{number}"[:128]


def records(session: Session, spec: SweepSpec, trials: Sequence[SweepTrial]) -> list[TrialRecord]:
    """The trials as an ask needs them: a sampler reads only each trial's last report."""
    from core.sweeps.study import TrialRecord

    last = reported(
        session, spec.objective.metric, [trial.job_id for trial in trials if trial.job_id is not None]
    )
    return [
        TrialRecord(
            number=trial.number,
            params=trial.params,
            state=TrialState(trial.state),
            value=trial.value,
            system_attrs=trial.system_attrs,
            reports={found.last_step: found.latest} if (found := last.get(trial.job_id or -1)) else {},
        )
        for trial in trials
    ]


def _wants_more(spec: SweepSpec, trials: Sequence[SweepTrial]) -> bool:
    running = sum(trial.state == TrialState.RUNNING for trial in trials)
    return len(trials) < spec.max_trials and running < spec.parallel


@dataclass(frozen=True)
class _Asked:
    """A trial asked of Optuna and planned on what a read saw: what the short write then records."""

    trial: SweepTrial
    job: Job | None  # None: its spec did not validate, and the trial ends failed
    spec: JobSpec | None
    plan: Plan | None


def _ask(session: Session, sweep: Sweep, spec: SweepSpec, trials: list[SweepTrial]) -> _Asked:
    from core.sweeps.study import ask

    number = len(trials)
    asked = ask(spec, records(session, spec, trials))
    trial = SweepTrial(
        sweep_id=sweep.id,
        number=number,
        params=asked.params,
        system_attrs=asked.system_attrs,
        state=TrialState.RUNNING,
    )
    written = trial_spec(spec.spec, asked.params)
    try:
        job_spec = JobSpec.model_validate(written)
        plan = resolve_plan(
            job_spec
        )  # the cluster was judged at the sweep's creation, on the space's corners
    except (ValidationError, SpecError) as exc:
        trial.state = TrialState.FAILED
        trial.message = f"its spec with {asked.params} is not valid: {exc}"
        trial.finished_at = utcnow()
        return _Asked(trial, None, None, None)
    job = Job(
        name=trial_name(sweep, number),
        owner=sweep.owner,
        status=JobStatus.QUEUED,
        spec=written,
        plan=plan.public(),
        total_gpus=plan.total_gpus,
        priority=job_spec.priority,
        requested_by=sweep.owner,
        sweep_id=sweep.id,
        trial=number,
    )
    return _Asked(trial, job, job_spec, plan)


def _locked(session: Session, sweep_id: int) -> Sweep | None:
    """The sweep's row, held until the caller commits, before anything of it is read: so two askers record
    their trials one after the other, and a trial's end (core/sweeps/told.py) commits wholly before or after
    what the caller reads and writes. The write holds the row on PostgreSQL and the database on SQLite, where
    a SELECT ... FOR UPDATE holds nothing and reads outside any transaction: a settle that read a trial still
    running, then cleared `trials_due` over the end that set it meanwhile, left its sweep running for good."""
    session.execute(update(Sweep).where(Sweep.id == sweep_id).values(trials_due=Sweep.trials_due))
    query = select(Sweep).where(Sweep.id == sweep_id)
    return session.execute(query.execution_options(populate_existing=True)).scalar_one_or_none()


def _record(sweep_id: int, asked: _Asked) -> bool:
    """The asked trial and its job, in one short write, unless another asker recorded this number first,
    the sweep ended, or the owner's job quota filled meanwhile. True when recorded; the job is rung after.
    On SQLite the row lock is no lock (two askers may both count the same trials before either writes):
    there the trial's unique number decides, and the second to commit loses as it would have here."""
    try:
        return _recorded(sweep_id, asked)
    except IntegrityError:
        return False


def _recorded(sweep_id: int, asked: _Asked) -> bool:
    with session_scope() as session:
        sweep = _locked(session, sweep_id)
        count = select(func.count()).where(SweepTrial.sweep_id == sweep_id)
        if (
            sweep is None
            or sweep.status != SweepStatus.RUNNING
            or session.scalar(count) != asked.trial.number
        ):
            return False
        job = asked.job
        if job is not None:
            assert asked.plan is not None and asked.spec is not None
            if job_room(session, get_settings(), sweep.owner) < 1:
                return False
            session.add(job)
            session.flush()  # gives the job its id, which the argv names, as a submission's does
            show_planned(asked.plan, asked.spec, get_settings(), job.id)
            job.plan = asked.plan.public()
            asked.trial.job_id = job.id
            message = f"trial {asked.trial.number} of sweep {sweep.id} ({sweep.name})"
            session.add(
                JobEvent(job_id=job.id, to_status=JobStatus.QUEUED, reason="submitted", message=message)
            )
        session.add(asked.trial)
    if job is not None:
        ring_soon(job.id)
    return True


def _settle(sweep_id: int) -> None:
    """Nothing more to ask now: the sweep is completed once every trial has ended, and stays due only while
    it wants trials its owner's quota has no room for (the reconciler looks again at its next pass)."""
    with session_scope() as session:
        sweep = _locked(session, sweep_id)
        if sweep is None:
            return
        trials = trials_of(session, sweep_id)
        spec = config(sweep)
        running = sweep.status == SweepStatus.RUNNING
        if running and len(trials) >= spec.max_trials and all(t.state != TrialState.RUNNING for t in trials):
            sweep.status, sweep.finished_at = SweepStatus.COMPLETED, utcnow()
            running = False
        sweep.trials_due = running and _wants_more(spec, trials)


def top_up(sweep_id: int) -> list[int]:
    """Ask for trials until `parallel` run, `max_trials` exist or the owner's job quota is full (a trial's
    job counts against it as any job does: the rest wait); then settle the sweep. Returns the new trials'
    numbers."""
    made: list[int] = []
    while True:
        with session_scope() as session:  # reads only: Optuna and planning hold no write
            sweep = session.get(Sweep, sweep_id)
            if sweep is None:
                return made
            spec = config(sweep)
            trials = trials_of(session, sweep_id)
            wanted = (
                sweep.status == SweepStatus.RUNNING
                and _wants_more(spec, trials)
                and job_room(session, get_settings(), sweep.owner) > 0
            )
            asked = _ask(session, sweep, spec, trials) if wanted else None
        if asked is None:
            _settle(sweep_id)
            return made
        if _record(sweep_id, asked):
            made.append(asked.trial.number)
        elif not _still_asking(sweep_id, asked.trial.number):
            _settle(sweep_id)
            return made


def _still_asking(sweep_id: int, number: int) -> bool:
    """After a record lost: True when another asker recorded that number (ask again, on the new rows); False
    when the sweep ended or the quota filled, where asking again would ask for nothing."""
    with session_scope() as session:
        count = session.scalar(select(func.count()).where(SweepTrial.sweep_id == sweep_id))
        return count is not None and count > number


def reconcile_sweeps() -> list[int]:
    """One reconciler pass: top up each sweep marked `trials_due`. Returns the sweeps it looked at."""
    failing = "sweep {}: asking for its next trials failed"
    return settle_due(Sweep.id, Sweep.trials_due, top_up, DUE_PER_PASS, failing)

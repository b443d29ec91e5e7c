"""A sweep's trials as rows: asking for the next ones (top_up) and telling one's end (trial_ended), each in
the transaction of the change that calls for it, so no trial is lost or made twice across restarts.

The API tops a new sweep up; core/transitions.py::move calls trial_ended when a trial's job reaches a
terminal state, in the worker or in the API, whichever ends it. Optuna itself is in core/sweep_study.py,
imported only when a sweep is touched (it takes most of a second to import)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from core.config import get_settings
from core.doorbell import enqueue_job
from core.launch import show_planned
from core.models import Job, JobEvent, Metric, Sweep, SweepTrial, utcnow
from core.quotas import job_room
from core.states import JobStatus
from core.sweep_spec import SweepSpec, TrialState, trial_spec
from jobspec.plan import resolve_plan
from jobspec.problems import SpecError
from jobspec.spec import JobSpec

if TYPE_CHECKING:
    from core.sweep_study import TrialRecord

log = logging.getLogger(__name__)

_RING = "trainyard_ring_after_commit"


class SweepStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


def config(sweep: Sweep) -> SweepSpec:
    return SweepSpec.model_validate(sweep.config)


def trial_name(sweep: Sweep, number: int) -> str:
    return f"{sweep.name}-trial-{number}"[:128]


def reports(session: Session, metric: str, job_ids: Sequence[int]) -> dict[int, dict[int, float]]:
    """Each job's reports of the objective, by step: the metric rows the worker tails from its events."""
    found: dict[int, dict[int, float]] = {job_id: {} for job_id in job_ids}
    query = select(Metric.job_id, Metric.step, Metric.value).where(
        Metric.job_id.in_(job_ids), Metric.name == metric
    )
    for job_id, step, value in session.execute(query):
        found[job_id][step] = value
    return found


def trials_of(session: Session, sweep_id: int) -> list[SweepTrial]:
    query = select(SweepTrial).where(SweepTrial.sweep_id == sweep_id).order_by(SweepTrial.number)
    return list(session.scalars(query))


def records(session: Session, spec: SweepSpec, trials: Sequence[SweepTrial]) -> list[TrialRecord]:
    from core.sweep_study import TrialRecord

    job_ids = [trial.job_id for trial in trials if trial.job_id is not None]
    reported = reports(session, spec.objective.metric, job_ids)
    return [
        TrialRecord(
            number=trial.number,
            params=trial.params,
            state=TrialState(trial.state),
            value=trial.value,
            system_attrs=trial.system_attrs,
            reports=reported.get(trial.job_id, {}) if trial.job_id is not None else {},
        )
        for trial in trials
    ]


def _locked(session: Session, sweep_id: int) -> Sweep | None:
    """The sweep's row, held until the caller commits (PostgreSQL; SQLite holds the whole database once the
    transaction has written), so two trials ending at once ask for their successors one after the other."""
    query = select(Sweep).where(Sweep.id == sweep_id).with_for_update()
    return session.execute(query.execution_options(populate_existing=True)).scalar_one_or_none()


def _ring_after_commit(session: Session, job_id: int) -> None:
    session.info.setdefault(_RING, []).append(job_id)


@event.listens_for(Session, "after_commit")
def _ring(session: Session) -> None:
    for job_id in session.info.pop(_RING, []):
        try:
            enqueue_job(job_id)
        except Exception:  # the row is committed: the reaper rings queued jobs that wait unclaimed
            log.warning("could not ring trial job %s; it waits for the requeue pass", job_id, exc_info=True)


@event.listens_for(Session, "after_rollback")
def _forget(session: Session) -> None:
    session.info.pop(_RING, None)


def _trial_job(session: Session, sweep: Sweep, number: int, spec: JobSpec, written: dict[str, Any]) -> Job:
    plan = resolve_plan(spec)  # the cluster was judged at the sweep's creation, on the space's corners
    job = Job(
        name=trial_name(sweep, number),
        owner=sweep.owner,
        status=JobStatus.QUEUED,
        spec=written,
        plan=plan.public(),
        total_gpus=plan.total_gpus,
        priority=spec.priority,
        requested_by=sweep.owner,
        sweep_id=sweep.id,
        trial=number,
    )
    session.add(job)
    session.flush()  # gives the job its id, which the argv names, as a submission's does
    show_planned(plan, spec, get_settings(), job.id)
    job.plan = plan.public()
    message = f"trial {number} of sweep {sweep.id} ({sweep.name})"
    session.add(JobEvent(job_id=job.id, to_status=JobStatus.QUEUED, reason="submitted", message=message))
    _ring_after_commit(session, job.id)
    return job


def _new_trial(session: Session, sweep: Sweep, spec: SweepSpec, trials: list[SweepTrial]) -> SweepTrial:
    """The next trial and its job; a trial whose spec does not validate ends failed, with no job."""
    from core.sweep_study import ask

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
        trial.job_id = _trial_job(session, sweep, number, job_spec, written).id
    except (ValidationError, SpecError) as exc:
        trial.state = TrialState.FAILED
        trial.message = f"its spec with {asked.params} is not valid: {exc}"
        trial.finished_at = utcnow()
    session.add(trial)
    session.flush()
    return trial


def top_up(session: Session, sweep_id: int) -> list[int]:
    """Ask for trials until `parallel` run, `max_trials` exist or the owner's job quota is full (a trial's job
    counts against it as any job does: the rest wait, and are asked for when a trial ends); mark the sweep
    completed once every trial has ended. The caller commits; the new jobs are rung after that. Returns the
    new trials' numbers."""
    sweep = _locked(session, sweep_id)
    if sweep is None or sweep.status != SweepStatus.RUNNING:
        return []
    spec = config(sweep)
    trials = trials_of(session, sweep_id)
    made: list[int] = []
    room = job_room(session, get_settings(), sweep.owner)
    while (
        len(trials) < spec.max_trials
        and sum(t.state == TrialState.RUNNING for t in trials) < spec.parallel
        and room > 0
    ):
        trials.append(_new_trial(session, sweep, spec, trials))
        made.append(trials[-1].number)
        room -= trials[-1].job_id is not None  # a trial whose spec did not validate has no job
    if len(trials) >= spec.max_trials and all(t.state != TrialState.RUNNING for t in trials):
        sweep.status = SweepStatus.COMPLETED
        sweep.finished_at = utcnow()
    return made


def _outcome(session: Session, job: Job, spec: SweepSpec) -> tuple[TrialState, float | None, str]:
    """The trial's state, value and why, from its job's end and its reports of the objective."""
    metric = spec.objective.metric
    reported = reports(session, metric, [job.id])[job.id]
    last = reported[max(reported)] if reported else None
    status = JobStatus(job.status)
    if status is JobStatus.PRUNED:
        return TrialState.PRUNED, last, job.message or "stopped by the pruner"
    if status is not JobStatus.SUCCEEDED:
        return TrialState.FAILED, None, f"its job {job.id} ended {status}: {job.message or job.status_reason}"
    if last is None:
        seen = ", ".join(sorted(job.latest_metrics or {})) or "none"
        why = (
            f"job {job.id} never reported the objective metric {metric!r} (it reported: {seen}); report it "
            f"(a program: ty.report_eval(step, {metric}=...)), or set objective.metric to one it reports"
        )
        return TrialState.FAILED, None, why
    return TrialState.COMPLETED, last, f"{metric}={last:.6g} at its last report"


def trial_ended(session: Session, job: Job) -> None:
    """Tell the sweep that the trial `job` runs has ended (Optuna's tell), then ask for what follows; in the
    caller's transaction, which moved the job."""
    if job.sweep_id is None or job.trial is None:
        return
    sweep = _locked(session, job.sweep_id)
    trial = session.get(SweepTrial, (job.sweep_id, job.trial))
    if sweep is None or trial is None or trial.state != TrialState.RUNNING:
        return
    trial.state, trial.value, trial.message = _outcome(session, job, config(sweep))
    trial.steps, trial.total_steps = job.progress_step, job.progress_total
    trial.finished_at = utcnow()
    session.flush()
    top_up(session, sweep.id)

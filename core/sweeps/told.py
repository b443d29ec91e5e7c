"""A trial's end, told in the transaction of the state change that ends its job (core/transitions.py::move):
the trial's state, value and why, and its sweep marked `trials_due`. Nothing else: what follows (Optuna's
next ask, a new job) is core/sweeps/asks.py's, run after the change has committed. Light on purpose: every
state change imports this module, and it imports only the rows and the states."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from core.models import Job, Metric, Sweep, SweepTrial, utcnow
from core.states import JobStatus, TrialState


def _last_report(session: Session, metric: str, job_id: int) -> float | None:
    """The job's report of `metric` at its last step: one seek down the metrics' key, however many it made."""
    query = (
        select(Metric.value)
        .where(Metric.job_id == job_id, Metric.name == metric)
        .order_by(Metric.step.desc())
        .limit(1)
    )
    return session.scalar(query)


def _outcome(session: Session, job: Job, metric: str) -> tuple[TrialState, float | None, str]:
    """The trial's state, value and why, from its job's end and its last report of the objective."""
    last = _last_report(session, metric, job.id)
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
    """Tell the sweep that the trial `job` runs has ended (Optuna's tell, as rows), in the caller's
    transaction, which moved the job. A repeat changes nothing: only a running trial is told."""
    if job.sweep_id is None or job.trial is None:
        return
    trial = session.get(SweepTrial, (job.sweep_id, job.trial))
    if trial is None or trial.state != TrialState.RUNNING:
        return
    accepted = session.scalars(select(Sweep.config).where(Sweep.id == job.sweep_id)).one()
    trial.state, trial.value, trial.message = _outcome(session, job, accepted["objective"]["metric"])
    trial.steps, trial.total_steps = job.progress_step, job.progress_total
    trial.finished_at = utcnow()
    session.execute(update(Sweep).where(Sweep.id == job.sweep_id).values(trials_due=True))

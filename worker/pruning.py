"""Early stopping of a sweep's trial: each report of the objective that the tail stored is judged by the
sweep's pruner, as Optuna's trial.report(value, step) then should_prune() would. The supervisor stops a
trial the pruner gives up on as it stops a cancelled job (SIGTERM: the ranks finish their step and keep a
final checkpoint) and records it `pruned`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import session_scope
from core.models import Job, Metric, Sweep, SweepTrial
from core.sweep_spec import PrunerName, SweepSpec, TrialState
from core.sweeps import config, records, trials_of


@dataclass
class TrialPruning:
    job_id: int
    sweep_id: int
    number: int

    @classmethod
    def for_job(cls, job_id: int) -> TrialPruning | None:
        """None for a job that is no sweep's trial, or whose sweep prunes nothing."""
        with session_scope() as session:
            job = session.get(Job, job_id)
            if job is None or job.sweep_id is None or job.trial is None:
                return None
            sweep = session.get_one(Sweep, job.sweep_id)
            if config(sweep).pruner is PrunerName.NONE:
                return None
            pruning = cls(job_id, job.sweep_id, job.trial)
        # Optuna, imported while the trial starts rather than at its first report: the import takes seconds on
        # a loaded host, which a small trial's epochs outran, so that it trained to its end before a verdict.
        import core.sweep_study  # noqa: F401

        return pruning

    def verdict(self) -> str | None:
        """Why the trial should stop now, or None; each new report is judged once, and a verdict is kept on
        the trial's row, so an attempt restarted after it stops at once."""
        with session_scope() as session:
            trial = session.get_one(SweepTrial, (self.sweep_id, self.number))
            if trial.state != TrialState.RUNNING:
                return None
            if trial.message is not None:
                return trial.message
            spec = config(session.get_one(Sweep, self.sweep_id))
            for step, value in self._new_reports(session, spec, trial.judged_step):
                trial.judged_step = step
                if self._judge(session, spec, trial, step):
                    trial.message = (
                        f"pruned at step {step}: {spec.objective.metric}={value:.6g} is not among the "
                        f"sweep's best at this point (pruner {spec.pruner})"
                    )
                    return trial.message
        return None

    def _new_reports(self, session: Session, spec: SweepSpec, after: int | None) -> list[tuple[int, float]]:
        query = select(Metric.step, Metric.value).where(
            Metric.job_id == self.job_id, Metric.name == spec.objective.metric
        )
        if after is not None:
            query = query.where(Metric.step > after)
        return [(step, value) for step, value in session.execute(query.order_by(Metric.step))]

    def _judge(self, session: Session, spec: SweepSpec, trial: SweepTrial, step: int) -> bool:
        """The pruner's answer with the trial's reports up to `step`, as if it had just reported it."""
        from core.sweep_study import should_prune  # Optuna: imported by the trials' supervisors only

        known = records(session, spec, trials_of(session, self.sweep_id))
        mine = known[self.number]
        known[self.number] = replace(mine, reports={s: v for s, v in mine.reports.items() if s <= step})
        verdict = should_prune(spec, known, self.number)
        trial.system_attrs = verdict.system_attrs
        return verdict.prune

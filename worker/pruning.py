"""Early stopping of a sweep's trial: the trial's newest reports of the objective, which the tail stored, are
judged by the sweep's pruner, as Optuna's trial.report(value, step) then should_prune() would. The supervisor
stops a trial the pruner gives up on as it stops a cancelled job (SIGTERM: the ranks finish their step and
keep a final checkpoint) and records it `pruned`.

A judgement costs what is new since the last one: the sweep's study lives in this process's memory
(core.sweeps.study.LiveStudy), shared by the supervisors of its trials here, and takes in only the rows added
since it last looked. Everything is read outside any write; the verdict is written by one short UPDATE, so
SQLite's one writer is never held while Optuna works.

Each judgement opens the trial's gate (jobspec/pruner_gate.py) up to the step judged: the trial never trains
more than GATE_LAG_S past a report of the objective that is not judged yet."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from core.config import get_settings
from core.db import session_scope
from core.models import Job, Metric, Sweep, SweepTrial
from core.states import TrialState
from core.sweeps.rows import trials_of
from core.sweeps.spec import PrunerName, SweepSpec, config
from jobspec.events import SQL_INT_MAX, MetricsEvent
from jobspec.pruner_gate import GATE_DIR, GATE_FILE, PrunerGate
from worker.event_lines import Read
from worker.rundir import write_fresh

if TYPE_CHECKING:
    from core.sweeps.study import LiveStudy

log = logging.getLogger(__name__)


@dataclass
class _SweepMemory:
    """One sweep's live study and how far into each trial's reports it has read."""

    study: LiveStudy
    lock: threading.Lock = field(default_factory=threading.Lock)
    read_through: dict[int, int] = field(default_factory=dict)  # trial number → last step taken in
    taken: dict[int, int] = field(default_factory=dict)  # trial number → reports taken in


# Shared by the supervisors of one sweep's trials in this process, and gone with the last of them.
_memories: weakref.WeakValueDictionary[int, _SweepMemory] = weakref.WeakValueDictionary()
_memories_lock = threading.Lock()


def _memory_of(sweep_id: int, spec: SweepSpec) -> _SweepMemory:
    from core.sweeps.study import LiveStudy  # Optuna: imported by the trials' supervisors only

    with _memories_lock:
        memory = _memories.get(sweep_id)
        if memory is None:
            memory = _memories[sweep_id] = _SweepMemory(LiveStudy(spec))
        return memory


@dataclass
class TrialPruning:
    job_id: int
    sweep_id: int
    number: int
    spec: SweepSpec
    memory: _SweepMemory  # held, so the sweep's study lives while this trial is supervised here
    run_dir: Path
    gate_at: int | None = None  # the step the trial's gate was last opened to

    @classmethod
    def for_job(cls, job_id: int, run_dir: Path) -> TrialPruning | None:
        """None for a job that is no sweep's trial, or whose sweep prunes nothing."""
        with session_scope() as session:
            job = session.get(Job, job_id)
            if job is None or job.sweep_id is None or job.trial is None:
                return None
            spec = config(session.get_one(Sweep, job.sweep_id))
            if spec.pruner is PrunerName.NONE:
                return None
            sweep_id, number = job.sweep_id, job.trial
        # Optuna, imported while the trial starts rather than at its first report: the import takes seconds on
        # a loaded host, which a small trial's epochs outran, so that it trained to its end before a verdict.
        return cls(job_id, sweep_id, number, spec, _memory_of(sweep_id, spec), run_dir)

    def has_news(self, events: Sequence[Read]) -> bool:
        """Whether `events` report the objective: the pruner judges nothing else, and a trial's other reports
        (its loss every few steps) would cost a judgement each, on a worker that supervises all its trials."""
        metric = self.spec.objective.metric
        return any(isinstance(event, MetricsEvent) and metric in event.values for event in events)

    def verdict(self) -> str | None:
        """Why the trial should stop now, or None. Each new report is judged once, in step order, as the
        trial made it; a verdict is kept on the trial's row, so a restarted attempt stops at once."""
        with session_scope() as session:
            trial = session.get_one(SweepTrial, (self.sweep_id, self.number))
            if trial.state != TrialState.RUNNING:
                return None
            if trial.message is not None:
                return trial.message
            with self.memory.lock:
                mine = self._catch_up(session, trial.judged_step)
                judged = self._judge(mine)
            judged_before = -1 if trial.judged_step is None else trial.judged_step
        if judged is None:
            # Past its bound on reports the trial is judged no more: nothing it reports is waited for.
            past_bound = self.memory.taken.get(self.number, 0) >= get_settings().sweep_pruner_max_reports
            self._open_gate(SQL_INT_MAX if past_bound else judged_before)
            return None
        step, message, attrs = judged
        with session_scope() as session:  # one short write; a trial ended meanwhile keeps its end
            session.execute(
                update(SweepTrial)
                .where(
                    SweepTrial.sweep_id == self.sweep_id,
                    SweepTrial.number == self.number,
                    SweepTrial.state == TrialState.RUNNING,
                )
                .values(judged_step=step, system_attrs=attrs, message=message)
            )
        self._open_gate(step)  # a trial told to stop is stopped by its SIGTERM, at its next report step
        return message

    def _open_gate(self, step: int) -> None:
        """Let the trial train on past its reports up to `step`; written only when that moves."""
        if step == self.gate_at:
            return
        gate = PrunerGate(metric=self.spec.objective.metric, judged=step).model_dump_json().encode()
        write_fresh(self.run_dir, GATE_DIR, GATE_FILE, lambda file: file.write(gate))
        self.gate_at = step

    def _judge(self, mine: dict[int, float]) -> tuple[int, str | None, dict[str, Any]] | None:
        """This trial's new reports, taken into the study one by one, each judged as it is taken in: the
        last step judged, the verdict's message (None: keep going) and what the pruner kept on the trial."""
        study, last = self.memory.study, None
        for step, value in sorted(mine.items()):
            study.report(self.number, step, value)
            verdict = study.judge(self.number)
            last = (step, None, verdict.system_attrs)
            if verdict.prune:
                why = (
                    f"pruned at step {step}: {self.spec.objective.metric}={value:.6g} is not among the "
                    f"sweep's best at this point (pruner {self.spec.pruner})"
                )
                return step, why, verdict.system_attrs
        return last

    def _catch_up(self, session: Session, judged_step: int | None) -> dict[int, float]:
        """Bring the sweep's study up to the rows: new trials, other trials' new reports, their ends. Returns
        this trial's reports not judged yet, which _judge takes in (an earlier attempt's supervisor judged
        those up to `judged_step`)."""
        from core.sweeps.study import TrialRecord

        memory = self.memory
        rows = trials_of(session, self.sweep_id)
        fresh = self._new_reports(session, rows)
        mine: dict[int, float] = {}
        for row in rows:
            reports = fresh.get(row.number, {})
            if reports:
                memory.read_through[row.number] = max(reports)
                memory.taken[row.number] = memory.taken.get(row.number, 0) + len(reports)
            if row.number == self.number:
                done = -1 if judged_step is None else judged_step
                # Another trial's supervisor may have taken in this trial's newest reports already (it
                # reads every trial's): those are this trial's to judge all the same.
                taken = memory.study.reports(row.number) if row.number < len(memory.study) else {}
                mine = {step: value for step, value in {**taken, **reports}.items() if step > done}
                reports = {step: value for step, value in reports.items() if step <= done}
            record = TrialRecord(
                number=row.number,
                params=row.params,
                state=TrialState(row.state),
                value=row.value,
                system_attrs=row.system_attrs,
                reports=reports,
            )
            if row.number == len(memory.study):
                memory.study.add(record)
            else:
                memory.study.update(record)
        return mine

    def _new_reports(self, session: Session, rows: list[SweepTrial]) -> dict[int, dict[int, float]]:
        """Each trial's reports past the step last taken in, up to the per-trial bound, in one query. A trial
        whose end the study knows is read no more."""
        cap = get_settings().sweep_pruner_max_reports
        memory = self.memory
        wanted = {
            row.job_id: row.number
            for row in rows
            if row.job_id is not None
            and not memory.study.has_ended(row.number)
            and memory.taken.get(row.number, 0) < cap
        }
        if not wanted:
            return {}
        past = [
            and_(Metric.job_id == job_id, Metric.step > memory.read_through.get(number, -1))
            for job_id, number in wanted.items()
        ]
        query = (
            select(Metric.job_id, Metric.step, Metric.value)
            .where(Metric.name == self.spec.objective.metric, or_(*past))
            .order_by(Metric.job_id, Metric.step)
        )
        found: dict[int, dict[int, float]] = {}
        for job_id, step, value in session.execute(query):
            reports = found.setdefault(wanted[job_id], {})
            if memory.taken.get(wanted[job_id], 0) + len(reports) < cap:
                reports[step] = value
        if (
            len(found.get(self.number, {}))
            and memory.taken.get(self.number, 0) + len(found[self.number]) >= cap
        ):
            log.warning(
                "job %s: trial %s of sweep %s reached %s reports of %s; the pruner judges it no more "
                "(sweep_pruner_max_reports)",
                self.job_id,
                self.number,
                self.sweep_id,
                cap,
                self.spec.objective.metric,
            )
        return found

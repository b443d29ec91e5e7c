"""Optuna's study of a sweep, in two forms. For an ask, rebuilt from the service's rows each time: the rows
are the only truth, so a restart loses nothing. Each ask gets a sampler seeded with the sweep's seed and the
trial's number (a grid's, with the sweep's seed alone): the same rows ask the same. For the pruner, kept in
memory between reports (LiveStudy), so that judging a report costs what is new, not every report so far."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.pruners import BasePruner, MedianPruner, NopPruner, SuccessiveHalvingPruner
from optuna.samplers import BaseSampler, GridSampler, RandomSampler, TPESampler
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import TrialState as OptunaState
from optuna.trial import create_trial

from core.states import TrialState
from core.sweeps.spec import (
    AshaOptions,
    CategoricalParam,
    FloatParam,
    MedianOptions,
    PrunerName,
    SamplerName,
    SweepSpec,
)

# The service logs each trial's end itself; Optuna's per-trial INFO lines would repeat it.
optuna.logging.set_verbosity(optuna.logging.WARNING)


_OPTUNA_STATE = {
    TrialState.RUNNING: OptunaState.RUNNING,
    TrialState.COMPLETED: OptunaState.COMPLETE,
    TrialState.PRUNED: OptunaState.PRUNED,
    TrialState.FAILED: OptunaState.FAIL,
}


@dataclass(frozen=True)
class TrialRecord:
    """A trial as the rows hold it: what Optuna needs to take it back into a study."""

    number: int
    params: dict[str, Any]
    state: TrialState
    value: float | None = None
    system_attrs: dict[str, Any] = field(default_factory=dict)
    # The objective by step: every report for the pruner's study; the last one alone for an ask, which is all
    # a sampler reads of a trial's reports (TPE ranks a pruned trial by its last step and value).
    reports: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Asked:
    params: dict[str, Any]
    system_attrs: dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    prune: bool
    system_attrs: dict[str, Any]  # the trial's, once the pruner looked: ASHA keeps its rungs there


def distributions(sweep: SweepSpec) -> dict[str, BaseDistribution]:
    found: dict[str, BaseDistribution] = {}
    for path, param in sweep.parameters.items():
        if isinstance(param, CategoricalParam):
            found[path] = CategoricalDistribution(param.choices)
        elif isinstance(param, FloatParam):
            found[path] = FloatDistribution(param.low, param.top, log=param.log, step=param.step)
        else:
            found[path] = IntDistribution(param.low, param.top, log=param.log, step=param.step)
    return found


def _sampler(sweep: SweepSpec, number: int) -> BaseSampler:
    if sweep.sampler is SamplerName.GRID:
        # The seed shuffles the grid, and trial n takes the grid's point n: every ask must see one order.
        # Optuna lists every point of the grid here, at each ask: its size was capped when the sweep was made.
        return GridSampler(sweep.grid(), seed=sweep.seed)
    seed = sweep.seed + number
    if sweep.sampler is SamplerName.RANDOM:
        return RandomSampler(seed=seed)
    return TPESampler(seed=seed)


def _pruner(sweep: SweepSpec) -> BasePruner:
    options = sweep.options()
    if isinstance(options, AshaOptions):
        return SuccessiveHalvingPruner(**options.model_dump())
    if isinstance(options, MedianOptions):
        return MedianPruner(**options.model_dump())
    assert sweep.pruner is PrunerName.NONE
    return NopPruner()


def rebuild(sweep: SweepSpec, records: Sequence[TrialRecord], number: int) -> optuna.Study:
    """The study as the rows left it, with the sampler the trial `number` is asked with. Records come in
    number order, with no gaps: Optuna numbers trials in the order they are added."""
    direction = StudyDirection.MINIMIZE if sweep.objective.goal == "minimize" else StudyDirection.MAXIMIZE
    study = optuna.create_study(direction=direction, sampler=_sampler(sweep, number), pruner=_pruner(sweep))
    dists = distributions(sweep)
    for record in records:
        state = _OPTUNA_STATE[record.state]
        study.add_trial(
            create_trial(
                state=state,
                value=record.value if state is OptunaState.COMPLETE else None,
                params=record.params,
                distributions={path: dists[path] for path in record.params},
                system_attrs=record.system_attrs,
                intermediate_values=record.reports,
            )
        )
    return study


def ask(sweep: SweepSpec, records: Sequence[TrialRecord]) -> Asked:
    """The parameters of the next trial (number len(records)), and what the sampler keeps on it."""
    study = rebuild(sweep, records, len(records))
    trial = study.ask(fixed_distributions=distributions(sweep))
    asked = study.get_trials(deepcopy=False)[trial.number]
    return Asked(dict(trial.params), dict(asked.system_attrs))


class LiveStudy:
    """A sweep's study kept in memory between reports, for its pruner: each trial is added once, from its
    rows, and then takes in only what is new (reports, an end, the pruner's attributes) through Optuna's own
    storage interface, as trial.report() would. Rebuilt from the rows when a worker starts following the
    sweep, so a restart loses nothing.

    Optuna copies a trial's reports on each new one (as its own trial.report does), so a trial's cost grows
    with the square of its reports: the caller takes in at most a bounded number per trial."""

    def __init__(self, sweep: SweepSpec) -> None:
        self._storage = InMemoryStorage()
        direction = StudyDirection.MINIMIZE if sweep.objective.goal == "minimize" else StudyDirection.MAXIMIZE
        self._study = optuna.create_study(
            storage=self._storage, direction=direction, sampler=RandomSampler(), pruner=_pruner(sweep)
        )
        self._study_id = self._storage.get_study_id_from_name(self._study.study_name)
        self._distributions = distributions(sweep)
        self._ended: set[int] = set()  # trials told their end: Optuna refuses any change to them

    def __len__(self) -> int:
        return self._storage.get_n_trials(self._study_id)

    def _trial_id(self, number: int) -> int:
        return self._storage.get_trial_id_from_study_id_trial_number(self._study_id, number)

    def add(self, record: TrialRecord) -> None:
        """The next trial (number len(self)), with every report it has made so far."""
        assert record.number == len(self), "trials are added in number order, with no gaps"
        state = _OPTUNA_STATE[record.state]
        self._study.add_trial(
            create_trial(
                state=state,
                value=record.value if state is OptunaState.COMPLETE else None,
                params=record.params,
                distributions={path: self._distributions[path] for path in record.params},
                system_attrs=record.system_attrs,
                intermediate_values=record.reports,
            )
        )
        if record.state is not TrialState.RUNNING:
            self._ended.add(record.number)

    def has_ended(self, number: int) -> bool:
        return number in self._ended

    def reports(self, number: int) -> dict[int, float]:
        """Trial `number`'s reports taken in so far, by whichever supervisor of the sweep read them."""
        return dict(self._storage.get_trial(self._trial_id(number)).intermediate_values)

    def report(self, number: int, step: int, value: float) -> None:
        self._storage.set_trial_intermediate_value(self._trial_id(number), step, value)

    def update(self, record: TrialRecord) -> None:
        """A known trial's new reports, then what another worker's pruner kept on it, then its end."""
        if record.number in self._ended:
            return
        trial_id = self._trial_id(record.number)
        for step, value in record.reports.items():
            self._storage.set_trial_intermediate_value(trial_id, step, value)
        kept = self._storage.get_trial_system_attrs(trial_id)
        for key, value in record.system_attrs.items():
            if kept.get(key) != value:
                self._storage.set_trial_system_attr(trial_id, key, value)
        if record.state is not TrialState.RUNNING:
            state = _OPTUNA_STATE[record.state]
            values = [record.value] if state is OptunaState.COMPLETE and record.value is not None else None
            self._storage.set_trial_state_values(trial_id, state, values)
            self._ended.add(record.number)

    def judge(self, number: int) -> Verdict:
        """Whether the running trial `number` should stop, as Optuna's should_prune() would say right after
        its newest report."""
        trial_id = self._trial_id(number)
        pruned = self._study.pruner.prune(self._study, self._storage.get_trial(trial_id))
        return Verdict(pruned, dict(self._storage.get_trial_system_attrs(trial_id)))

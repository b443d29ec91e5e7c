"""Optuna's study of a sweep, rebuilt in memory from the service's rows each time it is asked something: the
rows are the only truth, so a restart loses nothing and a trial is made in the transaction that makes its job.
Each ask gets a sampler seeded with the sweep's seed and the trial's number (a grid's, with the sweep's
seed alone): the same rows ask the same."""

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
from optuna.study import StudyDirection
from optuna.trial import TrialState as OptunaState
from optuna.trial import create_trial

from core.sweep_spec import (
    AshaOptions,
    CategoricalParam,
    FloatParam,
    MedianOptions,
    PrunerName,
    SamplerName,
    SweepSpec,
    TrialState,
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
    reports: dict[int, float] = field(default_factory=dict)  # the objective at each step it reported


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


def should_prune(sweep: SweepSpec, records: Sequence[TrialRecord], number: int) -> Verdict:
    """Whether the running trial `number`, with the reports its record holds, should stop, as Optuna's
    trial.report(value, step) then should_prune() would say after its last report."""
    study = rebuild(sweep, records, number)
    trial = study.get_trials(deepcopy=False)[number]
    pruned = study.pruner.prune(study, trial)
    after = study.get_trials(deepcopy=False)[number]
    return Verdict(pruned, dict(after.system_attrs))

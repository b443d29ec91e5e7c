"""Optuna's study rebuilt from the rows for each ask: a grid sweep's trials take every point once."""

from __future__ import annotations

from core.sweep_spec import SweepSpec, TrialState
from core.sweep_study import TrialRecord, ask


def test_a_grid_s_trials_take_every_point_once() -> None:
    """Each ask rebuilds the study with a new sampler: the grid's order must be the same in every one."""
    points = [1e-4, 1e-3, 1e-2, 1e-1, 1.0]
    spec = SweepSpec(
        name="grid",
        spec={},
        parameters={"train.lr": {"type": "categorical", "choices": points}},
        objective={"metric": "eval_loss"},
        max_trials=len(points),
        sampler="grid",
        seed=3,
    )
    records: list[TrialRecord] = []
    for number in range(len(points)):
        asked = ask(spec, records)
        state = TrialState.RUNNING if number % 2 else TrialState.COMPLETED
        value = None if state is TrialState.RUNNING else 0.5
        records.append(TrialRecord(number, asked.params, state, value, asked.system_attrs))
    assert sorted(record.params["train.lr"] for record in records) == points

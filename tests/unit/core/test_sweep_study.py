"""Optuna's study rebuilt from the rows for each ask: a grid sweep's trials take every point once; a space is
counted, never listed, and planned at a bounded set of corners."""

from __future__ import annotations

import math
import re
import tracemalloc
from typing import Any

import pytest
from optuna.distributions import IntDistribution
from pydantic import ValidationError

from core.states import TrialState
from core.sweeps.spec import FloatParam, SweepSpec
from core.sweeps.study import TrialRecord, ask, distributions


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


def test_an_int_range_is_counted_not_listed() -> None:
    """Its top was the last of its values listed (high 6e7: 2.3 GB in the API); a grid's size is a product of
    counts. 10**7 values would list into hundreds of MB: counted, they take nothing."""
    ints = {"type": "int", "low": 0, "high": 10**7, "step": 3}
    tracemalloc.start()
    spec = SweepSpec(
        name="ints",
        spec={},
        parameters={"train.max_steps": ints, "train.batch_size": ints},
        objective={"metric": "eval_loss"},
        max_trials=1000,
        sampler="grid",
    )
    corners = spec.corners(8)
    counts = spec.grid_counts()
    found = distributions(spec)["train.max_steps"]
    assert isinstance(found, IntDistribution)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20
    assert corners == [
        {"train.max_steps": 0, "train.batch_size": 0},
        {"train.max_steps": 9999999, "train.batch_size": 9999999},
    ]
    assert counts == {"train.max_steps": 3333334, "train.batch_size": 3333334}
    assert (found.low, found.high, found.step) == (0, 9999999, 3)


@pytest.mark.parametrize(
    ("param", "fragment"),
    [
        ({"low": -1e308, "high": 1e308}, "overflows a float"),
        ({"low": 0.0, "high": 1.0, "step": 1e-300}, "more than 2**53 steps"),
        ({"low": 1e-300, "high": 1e300, "log": True}, "overflows a float"),
        ({"low": 0.0, "high": math.inf}, "finite"),
    ],
)
def test_a_float_range_that_cannot_be_counted_is_refused(param: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(fragment)):
        FloatParam.model_validate({"type": "float", **param})


def test_corners_take_each_parameter_s_ends_then_choices_in_turn_up_to_the_cap() -> None:
    spec = SweepSpec(
        name="corners",
        spec={},
        parameters={
            "model.kwargs.hidden": {"type": "categorical", "choices": list(range(1000))},
            "train.optimizer": {"type": "categorical", "choices": ["sgd", "adam", "adamw"]},
            "train.lr": {"type": "float", "low": 0.1, "high": 1.0, "step": 0.25},
        },
        objective={"metric": "eval_loss"},
    )
    lows = {"model.kwargs.hidden": 0, "train.optimizer": "sgd", "train.lr": 0.1}
    corners = spec.corners(5)
    assert corners == [
        lows,
        {"model.kwargs.hidden": 999, "train.optimizer": "adamw", "train.lr": 0.85},
        lows | {"model.kwargs.hidden": 1},
        lows | {"train.optimizer": "adam"},
        lows | {"model.kwargs.hidden": 2},
    ]
    assert len(spec.corners(2)) == 2

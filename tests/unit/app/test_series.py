"""Downsampling a metric series: bounded length, ends kept, spikes and dips kept, each name on its own."""

from __future__ import annotations

from app.services.series import downsample, downsample_by_name
from core.models import Metric


def series(values: list[float], name: str = "loss") -> list[Metric]:
    return [Metric(job_id=1, name=name, step=step, value=value) for step, value in enumerate(values)]


def test_short_series_come_back_whole() -> None:
    rows = series([3.0, 2.0, 1.0])
    assert downsample(rows, 3) == rows


def test_long_series_keep_ends_and_extremes_in_step_order() -> None:
    values = [1.0] * 1000
    values[437] = 50.0  # a spike evenly spaced picks would step over
    values[801] = -5.0
    kept = downsample(series(values), 20)
    assert len(kept) <= 20
    steps = [row.step for row in kept]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 999
    assert {437, 801} <= set(steps)


def test_two_points_are_first_and_last() -> None:
    assert [row.step for row in downsample(series([float(v) for v in range(10)]), 2)] == [0, 9]


def test_each_name_is_shortened_alone_and_merged_by_step() -> None:
    rows = series([float(v) for v in range(100)]) + series([0.5, 0.7], name="eval_accuracy")
    kept = downsample_by_name(rows, 10)
    assert sum(row.name == "loss" for row in kept) <= 10
    assert [row.step for row in kept if row.name == "eval_accuracy"] == [0, 1]
    assert [(row.step, row.name) for row in kept] == sorted((row.step, row.name) for row in kept)

"""Hogwild's main-process bookkeeping: how the workers' reports of one step become one report."""

from __future__ import annotations

import pytest

from trainers.hogwild import combine
from trainers.metrics import Report


def test_reports_average_loss_sum_throughput_and_keep_the_highest_memory() -> None:
    reports = [
        Report({"loss": 1.0, "lr": 0.1, "samples_per_s": 100.0, "step_time_s": 0.2, "peak_mem_mb": 50.0}, []),
        Report({"loss": 3.0, "lr": 0.1, "samples_per_s": 300.0, "step_time_s": 0.4, "peak_mem_mb": 70.0}, []),
    ]
    assert combine(reports).values == pytest.approx(
        {"loss": 2.0, "lr": 0.1, "samples_per_s": 400.0, "step_time_s": 0.3, "peak_mem_mb": 70.0}
    )


def test_a_step_not_finite_on_any_worker_counts_once() -> None:
    reports = [Report({"loss": 1.0}, [3, 7]), Report({"loss": 2.0}, [7, 9])]
    assert combine(reports).nonfinite_steps == [3, 7, 9]

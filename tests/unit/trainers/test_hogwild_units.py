"""Hogwild's main-process bookkeeping: how the workers' reports of one step become one report."""

from __future__ import annotations

import pytest

from trainers.hogwild import combine


def test_reports_average_loss_sum_throughput_and_keep_the_highest_memory() -> None:
    reports = [
        {"loss": 1.0, "lr": 0.1, "samples_per_s": 100.0, "step_time_s": 0.2, "peak_mem_mb": 50.0},
        {"loss": 3.0, "lr": 0.1, "samples_per_s": 300.0, "step_time_s": 0.4, "peak_mem_mb": 70.0},
    ]
    assert combine(reports) == pytest.approx(
        {"loss": 2.0, "lr": 0.1, "samples_per_s": 400.0, "step_time_s": 0.3, "peak_mem_mb": 70.0}
    )

"""The metrics the loop accumulates on the device and reduces at report steps, tested without processes."""

from __future__ import annotations

import pytest
import torch

from trainers.dist_env import DistEnv
from trainers.metrics import TrainMetrics
from trainers.objectives import LossValues
from trainers.strategies.single import SingleDeviceStrategy

SOLO = DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))


def test_metrics_report_a_sample_weighted_mean_then_start_a_new_window() -> None:
    metrics = TrainMetrics(SingleDeviceStrategy(SOLO), SOLO.device, start_step=10, window=5)
    metrics.add(LossValues(torch.tensor(1.0), {"acc": torch.tensor(0.5)}), samples=3)
    metrics.add(LossValues(torch.tensor(3.0), {"acc": torch.tensor(1.0)}), samples=1)
    metrics.flag(12, torch.tensor(True))
    report = metrics.report(step=12, lr=0.5)
    values = report.values
    assert values["loss"] == pytest.approx(1.5) and values["lr"] == 0.5
    assert values["acc"] == pytest.approx(0.625), "a loss function's metrics are weighted by samples too"
    assert values["samples_per_s"] > 0 and values["step_time_s"] > 0 and values["peak_mem_mb"] > 0
    assert report.nonfinite_steps == [12]
    metrics.add(LossValues(torch.tensor(7.0), {}), samples=2)
    after = metrics.report(step=13, lr=0.5)
    assert after.values["loss"] == pytest.approx(7.0) and "acc" not in after.values, (
        "each window starts afresh"
    )
    assert after.nonfinite_steps == []

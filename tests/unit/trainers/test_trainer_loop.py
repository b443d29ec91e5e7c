"""The metrics the loop accumulates on the device and reduces at report steps, tested without processes."""

from __future__ import annotations

import pytest
import torch

from trainers.dist_env import DistEnv
from trainers.metrics import TrainMetrics
from trainers.strategies.single import SingleDeviceStrategy

SOLO = DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))


def test_metrics_report_a_sample_weighted_mean_then_start_a_new_window() -> None:
    metrics = TrainMetrics(SingleDeviceStrategy(SOLO), SOLO.device, start_step=10)
    metrics.add(torch.tensor(1.0), samples=3)
    metrics.add(torch.tensor(3.0), samples=1)
    values = metrics.report(step=12, lr=0.5)
    assert values["loss"] == pytest.approx(1.5) and values["lr"] == 0.5
    assert values["samples_per_s"] > 0 and values["step_time_s"] > 0 and values["peak_mem_mb"] > 0
    metrics.add(torch.tensor(7.0), samples=2)
    assert metrics.report(step=13, lr=0.5)["loss"] == pytest.approx(7.0)

"""The loop's cadence rules and the metrics it reduces: pure pieces, tested without processes."""

from __future__ import annotations

import pytest
import torch

from trainers.dist_env import DistEnv
from trainers.loop import Position, checkpoint_due, evaluation_due, total_steps
from trainers.metrics import TrainMetrics
from trainers.spec import CheckpointSpec, TrainSpec
from trainers.strategies.single import SingleDeviceStrategy

SOLO = DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))


def positions(total: int, per_epoch: int) -> list[Position]:
    steps = range(1, total + 1)
    return [Position(s, (s - 1) // per_epoch + 1, s % per_epoch == 0, s == total) for s in steps]


def test_length_is_max_steps_or_epochs_times_steps_per_epoch() -> None:
    assert total_steps(TrainSpec(epochs=3), steps_per_epoch=7) == 21
    assert total_steps(TrainSpec(epochs=3, max_steps=5), steps_per_epoch=7) == 5
    assert total_steps(TrainSpec(), steps_per_epoch=7) == 7


def test_evaluation_every_n_epochs_and_once_at_the_end() -> None:
    train = TrainSpec(eval_every_epochs=2)
    assert [p.step for p in positions(25, 5) if evaluation_due(train, p)] == [10, 20, 25]
    assert [p.step for p in positions(20, 5) if evaluation_due(train, p)] == [10, 20]
    assert not any(evaluation_due(TrainSpec(eval_every_epochs=0), p) for p in positions(20, 5))


def test_checkpoints_by_step_by_epoch_and_final_never_twice_a_step() -> None:
    both = CheckpointSpec(every_n_steps=4, every_n_epochs=1)
    assert [p.step for p in positions(12, 5) if checkpoint_due(both, p)] == [4, 5, 8, 10, 12]
    no_final = CheckpointSpec(every_n_steps=0, every_n_epochs=2, save_final=False)
    assert [p.step for p in positions(12, 5) if checkpoint_due(no_final, p)] == [10]


def test_metrics_report_a_sample_weighted_mean_then_start_a_new_window() -> None:
    metrics = TrainMetrics(SingleDeviceStrategy(SOLO), SOLO.device, start_step=10)
    metrics.add(torch.tensor(1.0), samples=3)
    metrics.add(torch.tensor(3.0), samples=1)
    values = metrics.report(step=12, lr=0.5)
    assert values["loss"] == pytest.approx(1.5) and values["lr"] == 0.5
    assert values["samples_per_s"] > 0 and values["step_time_s"] > 0 and values["peak_mem_mb"] > 0
    metrics.add(torch.tensor(7.0), samples=2)
    assert metrics.report(step=13, lr=0.5)["loss"] == pytest.approx(7.0)

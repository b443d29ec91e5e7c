"""The plateau and one-cycle schedules follow torch's own schedulers, and plateau survives a checkpoint."""

from __future__ import annotations

import io

import pytest
import torch

from jobspec.spec import Schedule, TrainSpec
from trainers.schedule import (
    LrSchedule,
    PlateauState,
    build_optimizer,
    lr_at,
    observe_eval_loss,
    onecycle_lr,
    plateau_after,
    plateau_state,
)

LOSSES = [1.0, 0.9, 0.95, 0.92, 0.91, 0.89, 0.9, 0.9, 0.9, 0.5, 0.6, 0.7]


def _optimizer(lr: float = 0.4) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=lr)


@pytest.mark.parametrize("total, pct_start", [(100, 0.3), (37, 0.25), (10, 0.5), (5, 0.3)])
def test_onecycle_matches_torch_onecycle_lr(total: int, pct_start: float) -> None:
    optimizer = _optimizer()
    torch_schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=0.4, total_steps=total, pct_start=pct_start, cycle_momentum=False
    )
    expected = []
    for _ in range(total):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        torch_schedule.step()
    assert [onecycle_lr(step, total, 0.4, pct_start) for step in range(total)] == pytest.approx(expected)


def test_onecycle_peaks_at_the_planned_lr_after_warmup() -> None:
    s = LrSchedule(0.4, Schedule.ONECYCLE, 10, 110, 10, 3, 0.1, onecycle_pct_start=0.3)
    lrs = [lr_at(step, s) for step in range(110)]
    assert lrs[:10] == pytest.approx([0.04 * (i + 1) for i in range(10)])  # linear warmup first
    assert lrs[10] == pytest.approx(0.4 / 25)
    assert max(lrs[10:]) == pytest.approx(0.4)
    assert lrs.index(max(lrs[10:]), 10) == 10 + 29  # 30% of the 100 steps after warmup
    assert lrs[-1] == pytest.approx(0.4 / 25 / 1e4)


@pytest.mark.parametrize("patience", [0, 1, 2])
def test_plateau_decays_like_torch_reduce_lr_on_plateau(patience: int) -> None:
    optimizer = _optimizer(1.0)
    reference = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=patience)
    state = PlateauState()
    for loss in LOSSES:
        reference.step(loss)
        state = plateau_after(state, loss, patience, 0.5)
        assert state.factor == pytest.approx(optimizer.param_groups[0]["lr"])
    assert state.factor < 1.0


def test_plateau_lr_scales_the_base_lr_and_ignores_other_schedules() -> None:
    train = TrainSpec(schedule=Schedule.PLATEAU, plateau_patience=0, gamma=0.1)
    s = LrSchedule.from_spec(train, 0.2, total_steps=100, steps_per_epoch=10)
    optimizer = _optimizer()
    observe_eval_loss(optimizer, train, 1.0)
    observe_eval_loss(optimizer, train, 1.5)  # no gain, patience 0: decay now
    assert lr_at(50, s, plateau_state(optimizer).factor) == pytest.approx(0.02)

    constant = _optimizer()
    for loss in (1.0, 2.0, 3.0):
        observe_eval_loss(constant, TrainSpec(), loss)
    assert plateau_state(constant) == PlateauState()


def test_plateau_state_survives_a_checkpoint_of_the_optimizer() -> None:
    train = TrainSpec(schedule=Schedule.PLATEAU, plateau_patience=1, gamma=0.5)
    params = [torch.nn.Parameter(torch.ones(3))]
    optimizer = build_optimizer(params, train, 0.1, torch.device("cpu"))
    for loss in (1.0, 1.0, 1.0, 0.8, 0.9):
        observe_eval_loss(optimizer, train, loss)
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)

    resumed = build_optimizer([torch.nn.Parameter(torch.ones(3))], train, 0.1, torch.device("cpu"))
    assert plateau_state(resumed) == PlateauState()
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert plateau_state(resumed) == PlateauState(best=0.8, bad_evals=1, factor=0.5)

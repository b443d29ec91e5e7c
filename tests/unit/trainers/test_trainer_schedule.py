"""The learning-rate schedule is a pure function of the step; the optimizer factory honours the spec."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from jobspec.spec import Optimizer, Schedule, TrainSpec
from trainers.schedule import LrSchedule, build_optimizer, lr_at


def schedule(kind: Schedule, warmup: int = 0, total: int = 100) -> LrSchedule:
    return LrSchedule(
        base_lr=0.4,
        schedule=kind,
        warmup_steps=warmup,
        total_steps=total,
        steps_per_epoch=10,
        step_size_epochs=3,
        gamma=0.5,
    )


def test_linear_warmup_reaches_the_base_lr_then_holds() -> None:
    s = schedule(Schedule.CONSTANT, warmup=4)
    assert [lr_at(step, s) for step in range(6)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4, 0.4])


def test_cosine_decays_from_base_to_zero_after_warmup() -> None:
    s = schedule(Schedule.COSINE, warmup=10, total=110)
    assert lr_at(10, s) == pytest.approx(0.4)
    assert lr_at(60, s) == pytest.approx(0.2)
    assert lr_at(110, s) == pytest.approx(0.0, abs=1e-12)
    lrs = [lr_at(step, s) for step in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(lrs))
    assert lr_at(35, s) == pytest.approx(0.2 * (1 + math.cos(math.pi / 4)))


def test_step_decay_multiplies_by_gamma_every_step_size_epochs() -> None:
    s = schedule(Schedule.STEP)
    # 10 steps per epoch, decay every 3 epochs: steps 0-29 at base, 30-59 halved, 60-89 quartered.
    assert [lr_at(step, s) for step in (0, 29, 30, 59, 60, 95)] == pytest.approx(
        [0.4, 0.4, 0.2, 0.2, 0.1, 0.05]
    )


def test_constant_ignores_the_step() -> None:
    s = schedule(Schedule.CONSTANT)
    assert {lr_at(step, s) for step in range(0, 1000, 7)} == {0.4}


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        (Optimizer.SGD, torch.optim.SGD),
        (Optimizer.ADAM, torch.optim.Adam),
        (Optimizer.ADAMW, torch.optim.AdamW),
    ],
)
def test_optimizer_follows_the_spec(name: Optimizer, cls: type[torch.optim.Optimizer]) -> None:
    train = TrainSpec(optimizer=name, momentum=0.8, weight_decay=0.01)
    params = [torch.nn.Parameter(torch.zeros(3))]
    optimizer = build_optimizer(params, train, lr=0.3, device=torch.device("cpu"))
    group = optimizer.param_groups[0]
    assert type(optimizer) is cls
    assert group["lr"] == 0.3 and group["weight_decay"] == 0.01
    if name is Optimizer.SGD:
        assert group["momentum"] == 0.8

"""Strategies behind one interface: the single-device one directly, DDP's wiring with DDP itself mocked.

Real DDP over two gloo processes runs in tests/integration/test_trainer_torchrun.py.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn

from trainers.dist_env import DistEnv
from trainers.spec import ParallelSpec, Strategy
from trainers.strategies import Reduce, build_strategy, ddp
from trainers.strategies.ddp import DDPStrategy
from trainers.strategies.single import SingleDeviceStrategy

CPU_RANK1 = DistEnv(rank=1, local_rank=1, world_size=2, device=torch.device("cpu"))
SOLO = DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))


class FakeDDP(nn.Module):
    def __init__(
        self, module: nn.Module, device_ids: list[int] | None, gradient_as_bucket_view: bool
    ) -> None:
        super().__init__()
        self.module = module
        self.device_ids = device_ids
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.syncs_skipped = 0

    @contextmanager
    def no_sync(self) -> Any:
        self.syncs_skipped += 1
        yield


@pytest.fixture
def fake_ddp(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.Tensor, Any]]:
    reduced: list[tuple[torch.Tensor, Any]] = []

    def all_reduce(tensor: torch.Tensor, op: Any) -> None:
        reduced.append((tensor, op))
        tensor.mul_(2)  # what a SUM over two ranks holding equal values gives

    monkeypatch.setattr(ddp, "DistributedDataParallel", FakeDDP)
    monkeypatch.setattr(ddp.dist, "all_reduce", all_reduce)
    return reduced


def test_registry_picks_by_plan_strategy() -> None:
    assert type(build_strategy(Strategy.SINGLE, ParallelSpec(), SOLO)) is SingleDeviceStrategy
    assert type(build_strategy(Strategy.DDP, ParallelSpec(), CPU_RANK1)) is DDPStrategy
    with pytest.raises(ValueError, match="not implemented"):
        build_strategy(Strategy.AUTO, ParallelSpec(), SOLO)


def test_single_device_wraps_nothing_and_reduces_nothing() -> None:
    strategy = SingleDeviceStrategy(SOLO)
    model = nn.Linear(2, 2)
    assert strategy.setup(model) is model and strategy.unwrap() is model
    value = torch.tensor([3.0])
    assert strategy.all_reduce(value, Reduce.SUM) is value
    with strategy.no_sync():
        pass
    strategy.teardown()


def test_clip_grad_norm_bounds_the_gradient() -> None:
    strategy = SingleDeviceStrategy(SOLO)
    model = nn.Linear(4, 1)
    strategy.setup(model)
    (model(torch.ones(1, 4)) * 100).sum().backward()
    norm = strategy.clip_grad_norm(1.0)
    assert norm > 1.0
    clipped = torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]).norm()
    assert clipped == pytest.approx(1.0, rel=1e-4)


def test_ddp_on_cpu_wraps_without_device_ids_and_unwraps_to_the_bare_module(fake_ddp: list[Any]) -> None:
    strategy = DDPStrategy(CPU_RANK1, sync_batchnorm=False)
    model = nn.Linear(2, 2)
    wrapped = strategy.setup(model)
    assert isinstance(wrapped, FakeDDP) and wrapped.device_ids is None
    assert wrapped.gradient_as_bucket_view  # no copy of the reduced buckets back into .grad
    assert strategy.unwrap() is model


def test_ddp_on_cuda_pins_the_local_device(fake_ddp: list[Any]) -> None:
    local_rank1 = DistEnv(rank=3, local_rank=1, world_size=4, device=torch.device("cuda:1"))
    # wrap() alone: setup() would also move the module to cuda:1, which this CPU-only test cannot do.
    wrapped = DDPStrategy(local_rank1, sync_batchnorm=False).wrap(nn.Linear(2, 2))
    assert isinstance(wrapped, FakeDDP) and wrapped.device_ids == [1]


def test_ddp_no_sync_is_ddps_own(fake_ddp: list[Any]) -> None:
    strategy = DDPStrategy(CPU_RANK1, sync_batchnorm=False)
    wrapped = strategy.setup(nn.Linear(2, 2))
    with strategy.no_sync():
        pass
    assert isinstance(wrapped, FakeDDP) and wrapped.syncs_skipped == 1


def test_ddp_mean_is_a_sum_over_the_world_divided_by_its_size(fake_ddp: list[Any]) -> None:
    strategy = DDPStrategy(CPU_RANK1, sync_batchnorm=False)
    value = torch.tensor([3.0, 5.0])
    assert strategy.all_reduce(value, Reduce.MEAN).tolist() == [3.0, 5.0]
    assert strategy.all_reduce(value, Reduce.SUM).tolist() == [6.0, 10.0]
    assert value.tolist() == [3.0, 5.0], "the caller's tensor must not change"
    assert all(op == torch.distributed.ReduceOp.SUM for _, op in fake_ddp)


def test_sync_batchnorm_on_cpu_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="sync_batchnorm needs CUDA"):
        DDPStrategy(CPU_RANK1, sync_batchnorm=True)

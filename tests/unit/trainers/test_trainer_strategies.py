"""Strategies behind one interface: the single-device one directly; DDP's wiring with DDP itself mocked; the
process-group strategies' collectives with torch.distributed's calls recorded instead of run.

Real DDP and FSDP over two gloo processes run in tests/integration/test_trainer_torchrun.py and
test_strategies_sharded_cpu.py, pipeline in test_strategies_cpu.py.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import torch
from torch import nn

from jobspec.spec import ParallelSpec, Precision, Strategy, TrainSpec
from trainers.dist_env import DistEnv
from trainers.precision import MixedPrecision
from trainers.strategies import GroupOptions, build_strategy, ddp, process_group
from trainers.strategies.ddp import DDPStrategy
from trainers.strategies.fsdp import FSDPStrategy
from trainers.strategies.pipeline import PipelineStrategy
from trainers.strategies.process_group import ProcessGroupStrategy
from trainers.strategies.single import SingleDeviceStrategy

CPU = torch.device("cpu")
CPU_RANK1 = DistEnv(rank=1, local_rank=1, world_size=2, device=CPU)
SOLO = DistEnv(rank=0, local_rank=0, world_size=1, device=CPU)
GLOO = GroupOptions(backend="gloo", timeout=timedelta(seconds=42))


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
def fake_ddp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ddp, "DistributedDataParallel", FakeDDP)


@pytest.fixture
def collectives(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Records the process-group calls as (name, argument); an all_reduce doubles its tensor in place (a
    SUM over two ranks holding equal values), a broadcast leaves it as the source's."""
    calls: list[tuple[str, Any]] = []

    def all_reduce(tensor: torch.Tensor, op: Any) -> None:
        calls.append(("all_reduce", op))
        tensor.mul_(2)

    def broadcast(tensor: torch.Tensor, src: int) -> None:
        calls.append(("broadcast", src))

    dist = process_group.dist
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist, "broadcast", broadcast)
    monkeypatch.setattr(dist, "barrier", lambda: calls.append(("barrier", None)))
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: calls.append(("init_process_group", kw)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: calls.append(("destroy_process_group", None)))
    return calls


def test_registry_picks_by_plan_strategy() -> None:
    assert type(build_strategy(Strategy.SINGLE, ParallelSpec(), SOLO, GLOO)) is SingleDeviceStrategy
    built = build_strategy(Strategy.DDP, ParallelSpec(), CPU_RANK1, GLOO)
    assert type(built) is DDPStrategy and built.group == GLOO
    with pytest.raises(ValueError, match="not implemented"):
        build_strategy(Strategy.AUTO, ParallelSpec(), SOLO, GLOO)


def test_single_device_wraps_nothing_and_its_sums_are_the_totals() -> None:
    strategy = SingleDeviceStrategy(SOLO)
    strategy.setup_environment()
    model = nn.Linear(2, 2)
    assert strategy.setup_module(model) is model and strategy.unwrap() is model
    sums = torch.tensor([3.0, 1.0])
    assert strategy.reduce_metrics(sums).tolist() == [3.0, 1.0]
    with strategy.no_sync():
        pass
    strategy.teardown()


def test_clip_grad_norm_bounds_the_gradient() -> None:
    strategy = SingleDeviceStrategy(SOLO)
    model = nn.Linear(4, 1)
    strategy.setup_module(model)
    (model(torch.ones(1, 4)) * 100).sum().backward()
    norm = strategy.clip_grad_norm(1.0)
    assert norm > 1.0
    clipped = torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]).norm()
    assert clipped == pytest.approx(1.0, rel=1e-4)


@pytest.mark.parametrize("clip", [None, 0.01])
def test_optimizer_step_clips_when_asked_updates_and_drops_the_gradients(clip: float | None) -> None:
    strategy = SingleDeviceStrategy(SOLO)
    model = nn.Linear(4, 1)
    strategy.setup_module(model)
    optimizer = strategy.setup_optimizer(TrainSpec(momentum=0.0), lr=1.0)
    before = model.weight.detach().clone()
    (model(torch.ones(1, 4)) * 100).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    weight_grad, total = grads[0].norm().item(), torch.cat([g.flatten() for g in grads]).norm().item()
    strategy.optimizer_step(optimizer, MixedPrecision(Precision.FP32, CPU), clip)
    # Plain SGD at lr 1: the weight moves by its gradient, scaled down to a whole-model norm of `clip`.
    expected = weight_grad if clip is None else weight_grad * clip / total
    assert (model.weight.detach() - before).norm().item() == pytest.approx(expected, rel=1e-4)
    assert all(p.grad is None for p in model.parameters())


def test_ddp_on_cpu_wraps_without_device_ids_and_unwraps_to_the_bare_module(fake_ddp: None) -> None:
    strategy = DDPStrategy(CPU_RANK1, GLOO, sync_batchnorm=False)
    model = nn.Linear(2, 2)
    wrapped = strategy.setup_module(model)
    assert isinstance(wrapped, FakeDDP) and wrapped.device_ids is None
    assert wrapped.gradient_as_bucket_view  # no copy of the reduced buckets back into .grad
    assert strategy.unwrap() is model


def test_ddp_on_cuda_pins_the_local_device(fake_ddp: None) -> None:
    local_rank1 = DistEnv(rank=3, local_rank=1, world_size=4, device=torch.device("cuda:1"))
    # wrap() alone: setup_module() would also move the module to cuda:1, which this CPU-only test cannot do.
    wrapped = DDPStrategy(local_rank1, GLOO, sync_batchnorm=False).wrap(nn.Linear(2, 2))
    assert isinstance(wrapped, FakeDDP) and wrapped.device_ids == [1]


def test_ddp_no_sync_is_ddps_own(fake_ddp: None) -> None:
    strategy = DDPStrategy(CPU_RANK1, GLOO, sync_batchnorm=False)
    wrapped = strategy.setup_module(nn.Linear(2, 2))
    with strategy.no_sync():
        pass
    assert isinstance(wrapped, FakeDDP) and wrapped.syncs_skipped == 1


@pytest.mark.parametrize(("name", "built"), [(Strategy.DDP, DDPStrategy), (Strategy.FSDP, FSDPStrategy)])
def test_data_parallel_totals_are_sums_over_every_rank(
    collectives: list[tuple[str, Any]], name: Strategy, built: type[ProcessGroupStrategy]
) -> None:
    strategy = build_strategy(name, ParallelSpec(), CPU_RANK1, GLOO)
    assert type(strategy) is built
    sums = torch.tensor([3.0, 5.0])
    assert strategy.reduce_metrics(sums).tolist() == [6.0, 10.0]
    assert sums.tolist() == [3.0, 5.0], "the caller's tensor must not change"
    assert collectives == [("all_reduce", torch.distributed.ReduceOp.SUM)]


def test_pipeline_totals_are_the_last_stages_sums_broadcast(collectives: list[tuple[str, Any]]) -> None:
    first_of_three = DistEnv(rank=0, local_rank=0, world_size=3, device=CPU)
    sums = torch.tensor([0.0, 64.0])
    totals = PipelineStrategy(first_of_three, GLOO, ["1"], microbatches=2).reduce_metrics(sums)
    assert collectives == [("broadcast", 2)]
    assert totals is not sums and sums.tolist() == [0.0, 64.0]


def test_the_process_group_is_joined_at_setup_and_left_after_the_last_barrier(
    collectives: list[tuple[str, Any]],
) -> None:
    strategy = DDPStrategy(CPU_RANK1, GLOO, sync_batchnorm=False)
    strategy.setup_environment()
    assert collectives == [("init_process_group", {"backend": "gloo", "timeout": timedelta(seconds=42)})]
    strategy.teardown()
    assert [name for name, _ in collectives[1:]] == ["barrier", "destroy_process_group"]


def test_sync_batchnorm_on_cpu_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="sync_batchnorm needs CUDA"):
        DDPStrategy(CPU_RANK1, GLOO, sync_batchnorm=True)

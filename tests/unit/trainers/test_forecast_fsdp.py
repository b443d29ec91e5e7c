"""fsdp over several ranks as the forecast models it (trainers/forecast/): the parameters it holds gathered at
once, frozen ones too, and the bf16 compute of a model whose gathered parameters are bf16. The figures against
real runs are the bench's (`bench.forecast --strategy fsdp --gpus 2`, bench/RESULTS.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from torch import nn

from jobspec.spec import Precision, Strategy
from tests.unit.trainers.test_forecast_collectives import GB, phase, plan, traced
from trainers.forecast.calibration import H200
from trainers.forecast.devices import collective_bytes, per_device
from trainers.forecast.estimate import Target, Timing, collectives_bound, gpu_step_time
from trainers.forecast.trace import ModelKind, gathered_at_once

H200_TARGET = Target("NVIDIA H200", 141 * GB)


def blocks_model() -> tuple[nn.Module, list[nn.Module]]:
    """A root holding a head of its own, and three blocks of different sizes, the last holding an inner
    group (listed first, as fsdp_units lists inner groups)."""
    inner = nn.Linear(10, 10)  # 110 parameters
    blocks = nn.Sequential(nn.Linear(4, 4), nn.Linear(8, 8), nn.Sequential(inner, nn.Linear(2, 2)))
    model = nn.Sequential(blocks, nn.Linear(3, 3))  # the head: 12 parameters, the root's
    model[1].weight.requires_grad_(False)  # frozen parameters are gathered as well
    return model, [inner, *blocks]


def test_fsdp_holds_the_root_s_parameters_and_its_two_largest_groups_gathered() -> None:
    model, units = blocks_model()
    # Groups: 110 (inner), 20, 72, 6 (the last block less its inner group); the root 12.
    assert gathered_at_once(model, units) == 12 + 110 + 72


def test_fsdp_gathered_bytes_are_those_of_the_compute_precision_over_ranks_only() -> None:
    step = replace(traced(phase(grads=0, total=GB), phase(grads=GB, total=2 * GB)), gathered_count=GB // 8)
    sharded = per_device(step, plan(Strategy.FSDP, 2))
    assert sharded.strategy["fsdp_gathered"] == GB // 8 * 2  # bf16
    # One rank's fsdp is the bare model (trainers/strategies/fsdp.py): nothing is gathered.
    assert per_device(step, plan(Strategy.FSDP, 1)).strategy["fsdp_gathered"] == 0


@pytest.mark.parametrize("kind", [ModelKind.TRANSFORMER, ModelKind.ADAPTED])
def test_an_eager_language_model_gathered_in_bf16_computes_faster_than_single(kind: ModelKind) -> None:
    # Compute far above the host's side: the step is its compute.
    step = replace(traced(phase(0, GB), phase(GB, 2 * GB)), flops_per_step=1e17, ops_per_step=10, kind=kind)

    def step_s(strategy: Strategy, ranks: int, precision: Precision = Precision.BF16) -> float:
        placed = plan(strategy, ranks).model_copy(update={"precision": precision})
        return gpu_step_time(step, H200, H200_TARGET, compiled=False, plan=placed).step_s

    factor = H200.fsdp_bf16_compute[(kind, False)]
    assert factor < 1
    assert step_s(Strategy.FSDP, 2) == pytest.approx(step_s(Strategy.FSDP, 1) * factor, rel=1e-6)
    # fp32 gathers fp32 parameters, and ddp's replicas compute as single does.
    assert step_s(Strategy.FSDP, 2, precision=Precision.FP32) == pytest.approx(
        step_s(Strategy.FSDP, 1, precision=Precision.FP32), rel=1e-6
    )
    assert step_s(Strategy.DDP, 2) == step_s(Strategy.FSDP, 1)
    # Compiled steps were not measured so: they keep single's compute.
    assert (kind, True) not in H200.fsdp_bf16_compute


def test_fsdp_s_collectives_bound_its_step_at_their_own_rate() -> None:
    step = traced(phase(grads=0, total=GB), phase(grads=GB, total=2 * GB))
    sharded = plan(Strategy.FSDP, 2)
    sent_s = collective_bytes(step, sharded) / H200.fsdp_collective_bytes_per_s
    assert collectives_bound(Timing(sent_s / 2, "compute"), step, sharded, H200).step_s == sent_s
    # ddp's rate, fitted to its whole steps, would hold fsdp's step far longer.
    assert H200.collective_bytes_per_s < H200.fsdp_collective_bytes_per_s
    assert collectives_bound(Timing(sent_s * 2, "compute"), step, sharded, H200).step_s == sent_s * 2

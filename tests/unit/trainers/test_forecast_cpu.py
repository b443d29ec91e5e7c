"""A CPU rank's step (trainers/forecast/estimate.py's cpu_step_time): its products, its operations' own cost
and ddp's all-reduce, one after another, on steps made by hand. The constants were fitted to jobs run through
the service on the 2-core machine (bench/RESULTS.md, "CPU forecasts")."""

from __future__ import annotations

import pytest

from jobspec.plan import Plan
from jobspec.spec import Strategy
from tests.unit.trainers.test_forecast_collectives import plan
from trainers.forecast import calibration
from trainers.forecast.estimate import Target, cpu_step_time
from trainers.forecast.trace import ModelKind, Phase, Traced

NOTHING = Phase(params=0, buffers=0, grads=0, optimizer=0, activations=0, temporaries=0, total=0)


def traced(trained: int, flops: float, ops: int) -> Traced:
    return Traced(NOTHING, NOTHING, trained, trained, flops, ops, 0, ModelKind.OTHER)


def cpu_plan(strategy: Strategy, ranks: int) -> Plan:
    return plan(strategy, ranks, device="cpu")


def test_a_step_adds_its_products_its_operations_and_its_all_reduce() -> None:
    step = traced(trained=10**6, flops=1.6e10, ops=1000)
    alone = cpu_step_time(step, Target(None, None, cpu_cores=2), cpu_plan(Strategy.SINGLE, 1))
    products = 1.6e10 / (2 * calibration.CPU_FLOPS_PER_CORE)
    operations = 1000 * calibration.CPU_OP_S
    assert alone.step_s == pytest.approx(products + operations)
    assert alone.basis == "2 cores at the CPU defaults"

    ddp = cpu_step_time(step, Target(None, None, cpu_cores=1), cpu_plan(Strategy.DDP, 2))
    sent = 4 * 10**6  # fp32 gradients, 2(n-1)/n of them with two ranks
    all_reduce = sent / calibration.CPU_COLLECTIVE_BYTES_PER_S + calibration.CPU_COLLECTIVE_STEP_S
    assert ddp.step_s == pytest.approx(2 * products + operations + all_reduce)
    assert ddp.basis == "1 core at the CPU defaults, 4 MB of collectives a step"


def test_a_step_of_small_operations_is_their_cost_not_a_launch_of_a_tenth_of_a_millisecond() -> None:
    # examples/digits_ddp_cpu.json's MLP on one rank: 109 operations of next to no work each, measured at
    # 0.97 ms a step on the 2-core machine, where the first defaults forecast 10.9.
    step = cpu_step_time(
        traced(trained=17_000, flops=1.2e6, ops=109), Target(None, None, 2), cpu_plan(Strategy.SINGLE, 1)
    )
    assert 0.5e-3 < step.step_s < 1.5e-3

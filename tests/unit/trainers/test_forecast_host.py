"""The forecast follows its host's probe (trainers/forecast/host_probe.py): an eager step's launches and
fsdp's hooks are the host's own work, so they take as long as the host's cost per operation says against the
calibration's host; a step its GPU bounds does not move. The figures against real runs, a host slowed by hand
among them, are the bench's (`bench.forecast --strategy fsdp --gpus 2`, bench/RESULTS.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec, Strategy
from tests.unit.trainers.test_forecast_collectives import GB, phase, plan, traced
from trainers.forecast.calibration import H200
from trainers.forecast.estimate import Target, forecast, gpu_step_time

UNPROBED = Target("NVIDIA H200", 141 * GB)
AS_CALIBRATED = replace(UNPROBED, host_op_s=H200.reference_op_s)
TWICE_AS_SLOW = replace(UNPROBED, host_op_s=2 * H200.reference_op_s)


def step_s(target: Target, compiled: bool, strategy: Strategy, ranks: int, flops: float) -> float:
    step = replace(traced(phase(0, GB), phase(GB, 2 * GB)), flops_per_step=flops)
    return gpu_step_time(step, H200, target, compiled=compiled, plan=plan(strategy, ranks)).step_s


def test_a_slower_hosts_probe_lengthens_an_eager_host_bound_step() -> None:
    # 1000 operations and 13 fsdp groups on the host's side, a few ms of compute on the GPU's.
    eager_fsdp = (False, Strategy.FSDP, 2, 1e12)
    calibrated = step_s(UNPROBED, *eager_fsdp)
    assert step_s(AS_CALIBRATED, *eager_fsdp) == calibrated
    assert calibrated * 1.9 < step_s(TWICE_AS_SLOW, *eager_fsdp) <= calibrated * 2


@pytest.mark.parametrize("strategy, ranks", [(Strategy.SINGLE, 1), (Strategy.DDP, 2)])
def test_a_slower_hosts_probe_leaves_a_compiled_gpu_bound_step_as_it_was(
    strategy: Strategy, ranks: int
) -> None:
    compiled = (True, strategy, ranks, 1e16)
    assert step_s(TWICE_AS_SLOW, *compiled) == step_s(UNPROBED, *compiled)


def test_the_basis_says_whether_the_step_rests_on_this_hosts_probe() -> None:
    spec = JobSpec.model_validate(
        {
            "name": "probed",
            "model": {"arch": "gpt", "kwargs": {"n_layer": 2, "n_head": 2, "n_embd": 64}},
            "data": {"dataset": "synthetic_tokens", "block_size": 64, "vocab_size": 512, "num_samples": 64},
            "train": {"max_steps": 10, "batch_size": 4, "optimizer": "adamw"},
            "parallel": {"strategy": "single", "num_gpus": 1},
            "precision": "bf16",
        }
    )
    config = RunConfig(job_id=0, attempt=1, spec=spec, plan=resolve_plan(spec))
    unprobed, slower = forecast(config, UNPROBED, 10), forecast(config, TWICE_AS_SLOW, 10)
    assert "this host not probed" in unprobed.basis
    reference = f"{H200.reference_op_s * 1e6:.1f} us on the calibration's host"
    assert f"this host's probe, {2 * H200.reference_op_s * 1e6:.1f} us" in slower.basis
    assert reference in slower.basis and reference in unprobed.basis
    # A small eager model's step is its launches: twice as long on a host twice as slow at them.
    assert slower.step_time_s == pytest.approx(2 * unprobed.step_time_s, rel=0.05)

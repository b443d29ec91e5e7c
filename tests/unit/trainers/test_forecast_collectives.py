"""ddp's and fsdp's share of a traced step (trainers/forecast/devices.py) and their steps bound by their
collectives or by fsdp's hooks (estimate.py), on phases made by hand: the bench (`bench.forecast --strategy
ddp|fsdp --gpus 2`) has the figures against real runs."""

from __future__ import annotations

import pytest

from jobspec.plan import Plan
from jobspec.spec import Precision, Strategy
from trainers.forecast.calibration import H200
from trainers.forecast.devices import collective_bytes, per_device
from trainers.forecast.estimate import Target, Timing, collectives_bound, gpu_step_time, soft_max
from trainers.forecast.trace import ModelKind, Phase, Traced

GB = 10**9
TRAINED = GB // 4  # parameters: 1 GB of fp32 gradients


def phase(grads: int, total: int, frozen: int = 0) -> Phase:
    return Phase(
        params=GB, buffers=frozen, grads=grads, optimizer=0, activations=0, temporaries=0, total=total
    )


def traced(backward: Phase, update: Phase) -> Traced:
    return Traced(backward, update, TRAINED, TRAINED, 1e12, 1000, 13, ModelKind.TRANSFORMER)


def plan(strategy: Strategy, ranks: int, device: str = "cuda") -> Plan:
    """A plan of `ranks` ranks on one host: one per GPU in bf16, or on its CPU in fp32."""
    on_gpu = device == "cuda"
    return Plan(
        strategy=strategy,
        strategy_reason="",
        device=device,
        backend="nccl" if on_gpu else "gloo",
        world_size=ranks,
        nproc_per_node=ranks,
        data_parallel_size=ranks,
        gpus=None,
        num_gpus=ranks if on_gpu else 0,
        per_rank_batch=8,
        micro_batch=8,
        precision=Precision.BF16 if on_gpu else Precision.FP32,
        lr=0.1,
    )


def test_buckets_held_inside_the_backward_can_make_it_the_busiest_phase() -> None:
    # The update's peak (gradients made) outweighs the backward's alone, not with the buckets beside it.
    step = traced(backward=phase(grads=0, total=5 * GB), update=phase(grads=GB, total=5 * GB + GB // 2))
    share = per_device(step, plan(Strategy.DDP, 2))
    assert share.phase is step.backward and share.peak == 6 * GB
    assert share.strategy == {"ddp_gradient_buckets": GB}
    assert per_device(step, plan(Strategy.SINGLE, 1)).phase is step.update


def test_fsdp_shards_frozen_parameters_with_the_trained_state() -> None:
    step = traced(backward=phase(grads=0, total=3 * GB, frozen=2 * GB), update=phase(grads=0, total=0))
    share = per_device(step, plan(Strategy.FSDP, 2))
    assert share.strategy["fsdp_sharded_away"] == -(GB + 2 * GB) // 2  # parameters and frozen ones


def test_collectives_bound_a_step_shorter_than_them() -> None:
    step = traced(backward=phase(grads=0, total=GB), update=phase(grads=GB, total=2 * GB))
    assert collective_bytes(step, plan(Strategy.DDP, 1)) == 0
    assert collective_bytes(step, plan(Strategy.PIPELINE, 2)) == 0
    assert (
        collective_bytes(step, plan(Strategy.DDP, 4)) == GB * 2 * 3 // 4
    )  # a ring's share of fp32 gradients
    # Two bf16 all-gathers of the parameters, one reduce-scatter of the fp32 gradients.
    assert collective_bytes(step, plan(Strategy.FSDP, 2)) == (2 * TRAINED * 2 + GB) // 2
    sent = collective_bytes(step, plan(Strategy.DDP, 4))
    bound = sent / H200.collective_bytes_per_s
    short = collectives_bound(Timing(bound / 2, "compute"), step, plan(Strategy.DDP, 4), H200)
    assert short.step_s == bound and "collectives" in short.basis
    long = Timing(bound * 2, "compute")
    assert collectives_bound(long, step, plan(Strategy.DDP, 4), H200) == long


def test_fsdp_over_ranks_adds_its_hooks_per_group_to_the_host_s_side_of_the_step() -> None:
    step = traced(backward=phase(grads=0, total=GB), update=phase(grads=GB, total=2 * GB))
    h200 = Target("NVIDIA H200", 141 * GB)
    alone = gpu_step_time(step, H200, h200, compiled=True, plan=plan(Strategy.FSDP, 1))
    ddp = gpu_step_time(step, H200, h200, compiled=True, plan=plan(Strategy.DDP, 2))
    sharded = gpu_step_time(step, H200, h200, compiled=True, plan=plan(Strategy.FSDP, 2))
    assert alone == ddp  # one rank's fsdp is the bare model (trainers/strategies/fsdp.py)
    hooks = step.shard_groups * H200.fsdp_group_s[True]
    assert sharded.step_s == soft_max(alone.step_s, hooks) and "fsdp" in sharded.basis
    # Eager, they add to the launches of its operations.
    eager = gpu_step_time(step, H200, h200, compiled=False, plan=plan(Strategy.FSDP, 1))
    launches = step.ops_per_step * H200.launch_s[ModelKind.TRANSFORMER]
    assert launches > alone.step_s and "launches" in eager.basis
    eager_sharded = gpu_step_time(step, H200, h200, compiled=False, plan=plan(Strategy.FSDP, 2))
    sharded_launches = launches * H200.ranks_launch_factor[ModelKind.TRANSFORMER]
    # ddp's ranks launch as fsdp's do (calibration.py's ranks_launch_factor), without the hooks.
    eager_compute = (eager.step_s**3 - launches**3) ** (1 / 3)
    eager_ddp = gpu_step_time(step, H200, h200, compiled=False, plan=plan(Strategy.DDP, 2))
    assert eager_ddp.step_s == pytest.approx(soft_max(eager_compute, sharded_launches))
    host = sharded_launches + step.shard_groups * H200.fsdp_group_s[False]
    # The GPU's work (a few ms) hides under the host's: the step is little more than the host's side.
    assert host < eager_sharded.step_s < host * 1.01 and "fsdp" in eager_sharded.basis


def test_fsdp_over_ranks_takes_the_phase_busiest_once_sharded_and_the_foreach_step() -> None:
    # single's peak is the update, which holds the most state, but sharding takes half of that state: the
    # backward's activations, which stay whole, then outweigh it.
    backward = Phase(
        params=GB,
        buffers=0,
        grads=0,
        optimizer=2 * GB,
        activations=7 * GB // 4,
        temporaries=0,
        total=19 * GB // 4,
    )
    update = Phase(
        params=GB, buffers=0, grads=2 * GB, optimizer=2 * GB, activations=0, temporaries=0, total=5 * GB
    )
    step = traced(backward, update)
    assert step.peak is update
    share = per_device(step, plan(Strategy.FSDP, 2))
    assert share.phase is backward and share.strategy["fsdp_sharded_away"] == -3 * GB // 2
    assert "fsdp_foreach_step" not in share.strategy
    # With the backward's activations small, the update is busiest, with its foreach temporaries: an fp32
    # list as large as the trained shards.
    light = traced(Phase(**{**vars(backward), "activations": 0, "total": 3 * GB}), update)
    share = per_device(light, plan(Strategy.FSDP, 2))
    assert share.phase is light.update and share.strategy["fsdp_foreach_step"] == TRAINED * 4 // 2
    assert "fsdp_foreach_step" not in per_device(light, plan(Strategy.FSDP, 1)).strategy

"""Placement: modules on their own devices with inputs moved by pre-hooks; model_parallel and hybrid
placement as the strategies set it up; DataParallel's replicas under the caller's autocast.

Without GPUs, the meta device stands in for a second device: a forward that reaches a meta module with a
CPU tensor fails unless the hook moved it.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn

from jobspec.spec import DevicePlacement, ParallelSpec, Precision, Strategy
from trainers.checkpoint import bare_keys
from trainers.components import build_device
from trainers.dist_env import DistEnv
from trainers.objectives import CrossEntropy
from trainers.placement import hybrid_devices, place, stage_devices
from trainers.precision import MixedPrecision
from trainers.strategies.dp import AutocastReplica, DataParallelStrategy
from trainers.strategies.model_parallel import ModelParallelStrategy
from trainers.strategies.single import SingleDeviceStrategy

CPU = torch.device("cpu")
META = torch.device("meta")
SOLO = DistEnv(rank=0, local_rank=0, world_size=1, device=CPU)


def two_layers() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def test_hooks_move_inputs_to_each_modules_device() -> None:
    model = two_layers()
    place(model, {"0": CPU, "1": CPU, "2": META})
    assert model[0].weight.device == CPU and model[2].weight.device.type == "meta"
    out = model(torch.randn(5, 4))
    assert out.device.type == "meta" and out.shape == (5, 3)
    unplaced = two_layers()
    unplaced[2].to(META)
    with pytest.raises((RuntimeError, NotImplementedError)):
        unplaced(torch.randn(5, 4))


def test_a_model_with_tensors_of_its_own_cannot_be_placed_by_module() -> None:
    model = two_layers()
    model.register_buffer("scale", torch.ones(1))
    with pytest.raises(ValueError, match="outside its top-level modules"):
        place(model, {"0": CPU, "1": CPU, "2": CPU})


def test_hybrid_devices_keep_named_modules_on_the_cpu() -> None:
    gpu = torch.device("cuda", 0)
    placement = {"embedding": DevicePlacement.CPU, "classifier": DevicePlacement.GPU}
    names = ["embedding", "classifier", "head"]
    assert hybrid_devices(names, placement, gpu) == {"embedding": CPU, "classifier": gpu, "head": gpu}
    assert set(hybrid_devices(names, placement, CPU).values()) == {CPU}


@pytest.mark.parametrize(
    ("strategy", "placement", "made_on_the_gpu"),
    [
        (Strategy.SINGLE, None, True),
        (Strategy.DDP, {"layer1": DevicePlacement.GPU}, True),
        (Strategy.SINGLE, {"embedding": DevicePlacement.CPU}, False),
        (Strategy.MODEL_PARALLEL, None, False),
        (Strategy.PIPELINE, None, False),
    ],
)
def test_a_model_split_over_devices_is_made_on_the_cpu(
    strategy: Strategy, placement: dict[str, DevicePlacement] | None, made_on_the_gpu: bool
) -> None:
    gpu = torch.device("cuda", 0)
    made_on = build_device(ParallelSpec(placement=placement), strategy, gpu)
    assert made_on == (gpu if made_on_the_gpu else CPU)


def test_stage_i_goes_to_the_jobs_gpu_i() -> None:
    names = ["a", "b", "c", "d"]
    on_gpus = stage_devices(names, ["b", "d"], torch.device("cuda", 0))
    assert [on_gpus[name].index for name in names] == [0, 1, 1, 2]
    assert {device.type for device in on_gpus.values()} == {"cuda"}
    assert set(stage_devices(names, ["c"], CPU).values()) == {CPU}


def test_hybrid_single_puts_batches_where_the_first_module_lives() -> None:
    strategy = SingleDeviceStrategy(SOLO, {"0": DevicePlacement.CPU})
    model = two_layers()
    assert strategy.setup_module(model) is model and strategy.input_device == CPU
    assert model[0]._forward_pre_hooks, "placement installs its hooks even where every device is the CPU"


def test_model_parallel_on_cpu_stages_trains_exactly_like_single() -> None:
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    precision = MixedPrecision(Precision.FP32, CPU)
    results = []
    for strategy in (SingleDeviceStrategy(SOLO), ModelParallelStrategy(SOLO, ["2"])):
        model = two_layers()
        forward = strategy.setup_module(model)
        loss = strategy.forward_backward(forward, (x, y), CrossEntropy(), precision, divisor=2).loss
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((loss, grads, list(strategy.full_state(torch.optim.SGD(model.parameters()))[0])))
    (loss_a, grads_a, keys_a), (loss_b, grads_b, keys_b) = results
    assert torch.equal(loss_a, loss_b) and keys_a == keys_b == list(two_layers().state_dict())
    for a, b in zip(grads_a, grads_b, strict=True):
        assert torch.equal(a, b)


def run_in_thread(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """As DataParallel's parallel_apply runs each replica: in a worker thread of its own."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(module(x)))
    thread.start()
    thread.join()
    return out[0]


def test_replicas_run_under_the_callers_autocast_dtype() -> None:
    layer, x = nn.Linear(4, 4), torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        replica = AutocastReplica(layer, "cpu")
        assert layer(x).dtype == torch.bfloat16
        # Without the wrapper a worker thread runs in full precision: autocast state is thread-local.
        assert run_in_thread(layer, x).dtype == torch.float32
        assert run_in_thread(replica, x).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.float16):
        assert run_in_thread(AutocastReplica(layer, "cpu"), x).dtype == torch.float16
    # The state is the one captured when the replica was made, not whatever the thread has now.
    assert run_in_thread(replica, x).dtype == torch.bfloat16


def test_dp_unwraps_to_the_bare_model_and_saves_bare_keys() -> None:
    strategy = DataParallelStrategy(SOLO)
    model = two_layers()
    wrapped = strategy.setup_module(model)
    assert isinstance(wrapped, nn.DataParallel) and strategy.unwrap() is model
    assert next(iter(wrapped.state_dict())).startswith("module.")
    model_state, optimizer_state = strategy.full_state(torch.optim.SGD(model.parameters(), lr=0.1))
    assert list(model_state) == list(bare_keys(wrapped.state_dict())) == list(two_layers().state_dict())
    fresh = SingleDeviceStrategy(SOLO)
    fresh.setup_module(two_layers())
    fresh.load_full_state(model_state, optimizer_state, torch.optim.SGD(fresh.unwrap().parameters(), lr=0.1))
    assert wrapped(torch.ones(1, 4)).shape == (1, 3)

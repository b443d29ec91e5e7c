"""FSDP's pure parts: which blocks are sharded, dense embeddings, and the optimizer-state key conversion
that lets an fsdp checkpoint load into a plain torch.optim optimizer and back; one rank stays unsharded;
under bf16 the blocks are gathered in bf16, batch norms excepted."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed.fake_pg import FakeStore
from torchvision.models import ResNet

from jobspec.spec import ParallelSpec, Precision, Strategy
from trainers.data import BatchShape, DeviceFeeder
from trainers.data.held_out import ResidentHeldOut
from trainers.dist_env import DistEnv
from trainers.models import build_model
from trainers.models.embedding_bag import EmbeddingBagClassifier
from trainers.precision import MixedPrecision
from trainers.strategies import build_strategy
from trainers.strategies.fsdp import (
    FSDPStrategy,
    dense_embeddings,
    holds_batch_norm,
    indexed_optimizer_state,
    named_optimizer_state,
    shard_units,
)
from trainers.strategies.process_group import GroupOptions

CPU = torch.device("cpu")
GLOO = GroupOptions("gloo", timedelta(seconds=30))


def test_resnet_is_sharded_block_by_block() -> None:
    model = build_model("resnet18", {}, 3, 10, 32)
    assert isinstance(model, ResNet)
    units = shard_units(model)
    assert units[:2] == [model.conv1, model.bn1] and units[-1] is model.fc
    blocks = [block for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for block in layer]
    assert units[2:-1] == blocks


def test_small_models_shard_their_layers_or_blocks() -> None:
    mlp = build_model("mlp", {"hidden": 8, "depth": 2}, 1, 10, 8)
    assert isinstance(mlp, nn.Sequential)
    assert shard_units(mlp) == [mlp[1], mlp[3], mlp[5]]
    cnn = build_model("small_cnn", {"channels": 4}, 3, 10, 32)
    assert isinstance(cnn, nn.Sequential)
    assert shard_units(cnn) == [cnn[0], cnn[2], cnn[4], cnn[7]]
    bag = build_model("embedding_bag", {}, 1, 4, 1, vocab_size=50)
    assert isinstance(bag, EmbeddingBagClassifier)
    assert shard_units(bag) == [bag.embedding, bag.classifier]


def test_embeddings_train_dense_under_fsdp() -> None:
    bag = build_model("embedding_bag", {}, 1, 4, 1, vocab_size=50)
    assert isinstance(bag, EmbeddingBagClassifier)
    dense_embeddings(bag)
    bag(torch.randint(50, (3, 5))).sum().backward()
    assert bag.embedding.weight.grad is not None and not bag.embedding.weight.grad.is_sparse


def test_optimizer_state_round_trips_between_names_and_indices() -> None:
    torch.manual_seed(0)
    first, second = nn.Linear(3, 4), nn.Linear(4, 2)
    model = nn.Sequential(first, nn.ReLU(), second)
    optimizer = torch.optim.SGD(
        [{"params": [second.weight]}, {"params": [first.weight, first.bias, second.bias]}],
        lr=0.1,
        momentum=0.9,
    )
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    indexed = optimizer.state_dict()
    named = named_optimizer_state(indexed, model, optimizer)
    assert [g["params"] for g in named["param_groups"]] == [["2.weight"], ["0.weight", "0.bias", "2.bias"]]
    assert torch.equal(
        named["state"]["2.weight"]["momentum_buffer"], optimizer.state[second.weight]["momentum_buffer"]
    )
    back = indexed_optimizer_state(named)
    assert back["param_groups"] == indexed["param_groups"]
    assert back["state"].keys() == indexed["state"].keys()
    fresh = torch.optim.SGD(
        [{"params": [second.weight]}, {"params": [first.weight, first.bias, second.bias]}],
        lr=0.1,
        momentum=0.9,
    )
    fresh.load_state_dict(back)
    assert torch.equal(
        fresh.state[first.bias]["momentum_buffer"], optimizer.state[first.bias]["momentum_buffer"]
    )


def test_every_rank_takes_as_many_eval_batches_for_fsdp_gathers() -> None:
    """A rank that runs out repeats a batch of its own, uncounted: user models may not take empty ones."""
    x, y = torch.arange(5.0).view(5, 1, 1, 1), torch.arange(5)
    held_out = ResidentHeldOut(
        DeviceFeeder((x, y), BatchShape(image_size=1, channels=1, channels_last=False), CPU, CPU)
    )
    shards = [
        [(b[1].tolist(), counted) for b, counted in held_out.shard(DistEnv(rank, rank, 2, CPU), 2, bool)]
        for rank in (0, 1)
    ]
    assert shards == [[([0, 2], True), ([4], True)], [([1, 3], True), ([1, 3], False)]]
    one_each = [list(held_out.shard(DistEnv(rank, rank, 8, CPU), 2, bool)) for rank in (4, 6)]
    assert [[(b[1].tolist(), counted) for b, counted in shard] for shard in one_each] == [
        [([4], True)],
        [([0], False)],
    ]


def test_one_rank_trains_the_bare_model_unsharded() -> None:
    """A shard of one rank is the whole model: no DTensor parameters (so the fused optimizers take them),
    no FSDP hooks, the loss may join the compiled forward, and the state saves as a sharded run's does."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        strategy = FSDPStrategy(DistEnv(0, 0, 1, CPU), GLOO)
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        assert strategy.setup_module(model) is model
        assert not any(isinstance(p, DTensor) for p in model.parameters())
        assert not isinstance(model, FSDPModule) and strategy.loss_in_forward_graph
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        with strategy.no_sync():
            model(torch.randn(5, 3)).sum().backward()
        optimizer.step()
        model_state, optimizer_state = strategy.full_state(optimizer)
        assert model_state.keys() == model.state_dict().keys()
        assert optimizer_state["state"].keys() == optimizer.state_dict()["state"].keys()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("precision", "param_dtype"),
    [(Precision.BF16, torch.bfloat16), (Precision.FP16, None), (Precision.FP32, None)],
)
def test_fsdp_gathers_in_bf16_under_bf16_alone(precision: Precision, param_dtype: torch.dtype | None) -> None:
    strategy = build_strategy(Strategy.FSDP, ParallelSpec(), DistEnv(0, 0, 2, CPU), GLOO, precision)
    assert isinstance(strategy, FSDPStrategy) and strategy.param_dtype == param_dtype


def test_a_resnets_batch_norms_are_in_its_units_not_its_root() -> None:
    model = build_model("resnet18", {}, 3, 10, 32)
    assert holds_batch_norm(model) and not holds_batch_norm(model, shard_units(model))
    assert not holds_batch_norm(model.fc) and holds_batch_norm(model.layer1[0])


@pytest.mark.parametrize("param_dtype", [torch.bfloat16, None])
def test_blocks_compute_in_the_param_dtype_and_keep_fp32_shards(param_dtype: torch.dtype | None) -> None:
    """Two ranks of a fake process group (collectives do nothing, shapes and dtypes are real): the linear
    units see their weights in param_dtype during the forward, the batch norm always in fp32 (its kernels
    refuse bf16 weights beside fp32 running statistics); shards and gradients stay fp32 for the optimizer."""
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        strategy = FSDPStrategy(DistEnv(0, 0, 2, CPU), GLOO, param_dtype=param_dtype)
        model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
        seen: list[torch.dtype] = []
        for unit in model:
            unit.register_forward_pre_hook(lambda unit, _: seen.append(unit.weight.dtype))
        strategy.setup_module(model)
        with MixedPrecision(Precision.BF16, CPU).autocast():
            model(torch.randn(3, 4)).float().sum().backward()
        compute = param_dtype or torch.float32
        assert seen == [compute, torch.float32, compute]
        assert all(isinstance(p, DTensor) and p.dtype == torch.float32 for p in model.parameters())
        assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
    finally:
        dist.destroy_process_group()


def test_a_channels_last_convolution_is_sharded_and_trains() -> None:
    """performance.channels_last lays a ResNet's weights out channels-last, which FSDP cannot shard (it
    refused them on two H200s): they go back to the default layout, the images stay channels-last."""
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        model = build_model("resnet18", {}, 3, 10, 32).to(memory_format=torch.channels_last)
        assert not model.conv1.weight.is_contiguous()
        FSDPStrategy(DistEnv(0, 0, 2, CPU), GLOO).setup_module(model)
        images = torch.randn(2, 3, 32, 32).to(memory_format=torch.channels_last)
        model(images).sum().backward()
        assert all(p.grad is not None for p in model.parameters())
    finally:
        dist.destroy_process_group()

"""A factory's model under the strategies' and performance switches' own rules: blocks by class name or
ModuleList, activation checkpointing that leaves gradients and state keys alone, names checked against the
built model, and the objectives a loss turns into."""

from __future__ import annotations

import copy
from collections import OrderedDict
from datetime import timedelta

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from jobspec.problems import SpecError
from jobspec.spec import DevicePlacement
from jobspec.stages import default_split_at
from trainers.blocks import blocks, outermost
from trainers.dist_env import DistEnv
from trainers.objectives import CrossEntropy, MeanSquaredError, UserLoss
from trainers.performance import checkpoint_activations, convolutional
from trainers.placement import hybrid_devices, top_level_only
from trainers.strategies.fsdp import FSDPStrategy, shard_units
from trainers.strategies.pipeline import criterion
from trainers.strategies.process_group import GroupOptions
from trainers.user_errors import UserCodeError

CPU = torch.device("cpu")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.inner(x))) + x


class Tower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(3, 4)
        self.layers = nn.ModuleList(Block() for _ in range(3))
        self.extras = nn.ModuleList([nn.Identity()])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_blocks_are_the_named_classes_or_the_largest_module_list() -> None:
    tower = Tower()
    assert blocks(tower, None) == list(tower.layers)
    assert blocks(tower, ["Linear"]) == [tower.stem, *(b.inner for b in tower.layers), tower.head]
    assert outermost(blocks(tower, ["Block", "Linear"]) or []) == [tower.stem, *tower.layers, tower.head]
    assert blocks(nn.Sequential(nn.Linear(2, 2)), None) is None, "no ModuleList: the strategy's own default"
    with pytest.raises(SpecError) as error:
        blocks(tower, ["Blok"])
    [problem] = error.value.problems
    assert problem.field == "parallel.wrap" and "BatchNorm1d, Block, Identity, Linear" in problem.fix


def test_fsdp_shards_blocks_inner_first_and_built_in_models_as_before() -> None:
    solo = DistEnv(rank=0, local_rank=0, world_size=1, device=CPU)
    group = GroupOptions("gloo", timedelta(seconds=10))
    tower = Tower()
    assert FSDPStrategy(solo, group).units(tower) == list(tower.layers)
    named = FSDPStrategy(solo, group, ["Block", "Linear"]).units(tower)
    assert named.index(tower.layers[0].inner) < named.index(tower.layers[0]), "fully_shard goes inside out"
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    assert FSDPStrategy(solo, group).units(mlp) == shard_units(mlp)


def test_activation_checkpointing_recomputes_blocks_without_changing_gradients_or_keys() -> None:
    torch.manual_seed(0)
    plain = Tower()
    checkpointed = checkpoint_activations(copy.deepcopy(plain))
    calls = [0]
    checkpointed.layers[0].inner.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    x = torch.randn(8, 3)
    for model in (plain, checkpointed):
        model(x).square().sum().backward()
    assert calls == [2], "the block ran again in backward"
    assert list(checkpointed.state_dict()) == list(plain.state_dict())
    for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(checkpointed.state_dict()[key], value, msg=key)


def test_a_named_sequential_keeps_its_names_when_checkpointed() -> None:
    model = nn.Sequential(OrderedDict(features=nn.Linear(2, 2), act=nn.ReLU(), head=nn.Linear(2, 2)))
    keys = ["features.weight", "features.bias", "head.weight", "head.bias"]
    assert list(model.state_dict()) == keys
    assert list(checkpoint_activations(model).state_dict()) == keys


def test_channels_last_applies_to_convolutional_models_only() -> None:
    assert convolutional(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten()))
    assert not convolutional(Tower())


def test_module_names_of_a_factorys_model_are_checked_once_built() -> None:
    names = ["stem", "layers", "extras", "head"]
    assert default_split_at(None, names, 3) == ["extras", "head"]
    with pytest.raises(
        SpecError, match=r"model.factory's model splits into at most 4 stages .* stem, layers"
    ):
        default_split_at(None, names, 5)
    with pytest.raises(
        SpecError, match=r"names 'body', which the model does not have; use some of stem, lay"
    ):
        hybrid_devices(names, {"body": DevicePlacement.CPU}, CPU)

    class Loose(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))
            self.body = nn.Linear(2, 2)

    with pytest.raises(ValueError, match=r"outside its top-level modules \(scale\), so pipeline cannot"):
        top_level_only(Loose(), "pipeline")


def test_built_in_losses_take_input_target_pairs() -> None:
    model = nn.Linear(3, 2)
    x, labels, targets = torch.randn(4, 3), torch.tensor([0, 1, 1, 0]), torch.randn(4, 2)
    loss, metrics = CrossEntropy()(model, (x, labels))
    torch.testing.assert_close(loss, F.cross_entropy(model(x), labels))
    assert metrics == {}
    with torch.no_grad():
        count, summed, correct = CrossEntropy().eval_sums(model, (x, labels)).tolist()
    assert count == 4 and summed == pytest.approx(4 * loss.item(), rel=1e-6) and 0 <= correct <= 4
    assert MeanSquaredError().eval_sums(model, (x, targets))[1].item() == pytest.approx(
        4 * F.mse_loss(model(x), targets).item(), rel=1e-6
    )
    with pytest.raises(UserCodeError, match=r"train\.loss=mse needs targets shaped like the model's output"):
        MeanSquaredError()(model, (x, labels))
    with pytest.raises(UserCodeError, match="takes \\(input, target\\) batches, and the data yields a dict"):
        CrossEntropy()(model, {"x": x})
    with pytest.raises(ValueError, match=r"pipeline runs train\.loss cross_entropy or mse only"):
        criterion(UserLoss(lambda model, batch: batch, "models:loss"))


def test_a_users_loss_metrics_are_checked_and_named_alike_every_call() -> None:
    def loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> object:
        out = model(batch["x"]).mean()
        return batch["returns"](out)

    model, x = nn.Linear(3, 1), torch.randn(4, 3)
    user = UserLoss(loss, "models:loss")
    _, metrics = user(model, {"x": x, "returns": lambda out: (out, {"b": out * 2, "a": out})})
    assert set(metrics) == {"a", "b"} and user.names == ("a", "b")
    with torch.no_grad():
        sums = user.eval_sums(model, {"x": x, "returns": lambda out: (out, {"b": 2 * out, "a": out})})
    count, summed, a, b = sums.tolist()
    assert count == 4 and a == pytest.approx(summed) and b == pytest.approx(2 * summed)
    assert user.eval_values([4.0, 8.0, 4.0, 12.0]) == {"eval_loss": 2.0, "eval_a": 1.0, "eval_b": 3.0}
    wrong = [
        (lambda out: (out, {"a": out}), "returned metrics a after a, b"),
        (lambda out: out.expand(4), "as its loss; return a 0-d floating-point tensor"),
        (lambda out: (out, [out]), "returned a builtins.list as its metrics"),
    ]
    for returns, fragment in wrong:
        with pytest.raises(UserCodeError, match=fragment.replace("(", "\\(")):
            user(model, {"x": x, "returns": returns})
    with pytest.raises(UserCodeError, match="a metric named 'loss'"):
        UserLoss(loss, "models:loss")(model, {"x": x, "returns": lambda out: (out, {"loss": out})})

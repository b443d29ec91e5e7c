"""Optimizer state by name: a whole-model state cut into stages and merged back is the state it was."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainers.optimizer_state import merge, to_indexed, to_named


def trained_state(optimizer_name: str) -> tuple[nn.Module, dict[str, Any]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    optimizer: torch.optim.Optimizer = (
        torch.optim.Adam(model.parameters(), lr=0.1)
        if optimizer_name == "adam"
        else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    )
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    return model, optimizer.state_dict()


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert sorted(a["state"]) == sorted(b["state"])
    for index, state in a["state"].items():
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(b["state"][index][key])), (index, key)


def test_round_trip_by_name_is_the_identity() -> None:
    for optimizer_name in ("sgd", "adam"):
        model, state = trained_state(optimizer_name)
        names = [name for name, _ in model.named_parameters()]
        assert_same_state(to_indexed(to_named(state, names)), state)


def test_stages_cut_from_the_whole_and_merged_back_give_the_whole() -> None:
    model, state = trained_state("adam")
    names = [name for name, _ in model.named_parameters()]
    whole = to_named(state, names)
    first, second = whole.restricted_to(names[:2]), whole.restricted_to(names[2:])
    # What a stage's own optimizer saves: its parameters numbered from 0.
    assert to_indexed(second)["param_groups"][0]["params"] == [0, 1]
    assert sorted(to_indexed(second)["state"]) == [0, 1]
    assert_same_state(to_indexed(merge([first.on_cpu(), second.on_cpu()])), state)

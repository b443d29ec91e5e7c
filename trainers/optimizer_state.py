"""Optimizer state by parameter name, so it survives cutting the model differently.

torch saves optimizer state by parameter index (its position in the optimizer's groups), which means
nothing once a model is split over pipeline stages with an optimizer each. By name, a stage takes its
part of a whole-model checkpoint, and rank 0 merges the stages' parts back into the whole-model form that
single, ddp, dp and model_parallel save and load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class NamedOptimizerState:
    state: dict[str, dict[str, Any]]  # parameter name -> its state (momentum buffers, Adam moments, step)
    groups: list[tuple[dict[str, Any], list[str]]]  # per param group: hyperparameters, parameter names

    def restricted_to(self, names: Sequence[str]) -> NamedOptimizerState:
        keep = set(names)
        return NamedOptimizerState(
            state={name: s for name, s in self.state.items() if name in keep},
            groups=[(hyper, [n for n in group if n in keep]) for hyper, group in self.groups],
        )

    def on_cpu(self) -> NamedOptimizerState:
        """A copy another process can unpickle without touching this process's GPU."""
        state = {
            name: {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
            for name, s in self.state.items()
        }
        return NamedOptimizerState(state=state, groups=self.groups)


def to_named(optimizer_state: dict[str, Any], names: Sequence[str]) -> NamedOptimizerState:
    """names: the parameters' names in the optimizer's own order (its groups, one after another)."""
    return NamedOptimizerState(
        state={names[index]: s for index, s in optimizer_state["state"].items()},
        groups=[
            ({k: v for k, v in group.items() if k != "params"}, [names[i] for i in group["params"]])
            for group in optimizer_state["param_groups"]
        ],
    )


def to_indexed(named: NamedOptimizerState) -> dict[str, Any]:
    """torch's form: parameters numbered group by group, in the order the groups list them."""
    index: dict[str, int] = {}
    groups = []
    for hyper, group in named.groups:
        groups.append({**hyper, "params": [index.setdefault(name, len(index)) for name in group]})
    return {"state": {index[name]: s for name, s in named.state.items()}, "param_groups": groups}


def merge(parts: Sequence[NamedOptimizerState]) -> NamedOptimizerState:
    """Stages' states into one, group by group, stages in order."""
    if len({len(part.groups) for part in parts}) != 1:
        raise ValueError("the stages' optimizers have different param groups; their state cannot be merged")
    state: dict[str, dict[str, Any]] = {}
    for part in parts:
        state.update(part.state)
    groups = [
        (parts[0].groups[g][0], [name for part in parts for name in part.groups[g][1]])
        for g in range(len(parts[0].groups))
    ]
    return NamedOptimizerState(state=state, groups=groups)

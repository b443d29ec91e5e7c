"""A model's blocks: the units that fsdp shards and activation checkpointing recomputes one at a time.

parallel.wrap names their classes. By default they are the children of the model's largest ModuleList (a
transformer's layers); a model without one keeps each strategy's own default (trainers/strategies/fsdp.py,
trainers/performance.py), which is what the built-in models use.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from jobspec.problems import refuse


def class_names(model: nn.Module) -> list[str]:
    return sorted({type(module).__name__ for module in model.modules()})


def blocks(model: nn.Module, wrap: Sequence[str] | None) -> list[nn.Module] | None:
    """The blocks in the model's order, or None where neither parallel.wrap nor a ModuleList names any.
    Raises a SpecError on parallel.wrap, listing the model's classes, for a name the model does not use."""
    if wrap:
        used = class_names(model)
        for name in wrap:
            if name not in used:
                raise refuse(
                    "parallel.wrap",
                    f"parallel.wrap names {name!r}, a class the model does not use",
                    f"use some of {', '.join(used)}",
                )
        return [module for module in model.modules() if type(module).__name__ in wrap and module is not model]
    lists = [list(module) for module in model.modules() if isinstance(module, nn.ModuleList) and len(module)]
    return max(lists, key=len) if lists else None


def outermost(found: list[nn.Module]) -> list[nn.Module]:
    """The blocks not inside another one: recomputing a block recomputes what it holds."""
    inner = {id(sub) for block in found for sub in block.modules() if sub is not block}
    return [block for block in found if id(block) not in inner]

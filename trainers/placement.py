"""One model over several devices in one process: each stage unit lives on a device of its own.

A model's stage units are its top-level modules in forward order, a ModuleList's items each standing for
the list (a ModuleList has no forward: the model runs its items one after another), named as the state dict
names them: a GPT's `wte, wpe, drop, blocks.0, ..., ln_f, lm_head`. They are what parallel.split_at and
parallel.placement name, and what jobspec/catalog/archs.py lists per architecture.

A forward pre-hook on each placed unit moves its tensor inputs to that unit's device, so the model's own
forward() runs unchanged and autograd carries gradients back across the boundaries. The same mechanism
serves model_parallel (stage i on GPU i) and hybrid CPU/GPU placement (an embedding table on the CPU, the
rest on the GPU). Keys of the state dict are untouched: placement wraps nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from jobspec.problems import refuse
from jobspec.spec import DevicePlacement
from jobspec.stages import stage_groups
from trainers.data.batches import to_device

PreHook = Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]


def move(value: Any, device: torch.device) -> Any:
    """Tensors, also inside tuples, lists and dicts (a user's model may take any), onto `device`."""
    # A copy to the CPU must finish before the CPU reads it; copies to a GPU are ordered on its stream.
    return to_device(value, device, non_blocking=device.type != "cpu")


def inputs_mover(device: torch.device) -> PreHook:
    def hook(
        module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return tuple(move(a, device) for a in args), {k: move(v, device) for k, v in kwargs.items()}

    return hook


def stage_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's stage units with their qualified names, in forward order."""
    units: list[tuple[str, nn.Module]] = []
    for name, child in model.named_children():
        if isinstance(child, nn.ModuleList):
            units += [(f"{name}.{index}", item) for index, item in child.named_children()]
        else:
            units.append((name, child))
    return units


def unit_names(model: nn.Module) -> list[str]:
    return [name for name, _ in stage_units(model)]


def top_level_only(model: nn.Module, split: str) -> None:
    """Splitting a model by its top-level modules leaves nothing behind only if they hold all its tensors."""
    own = [name for name, _ in [*model.named_parameters(recurse=False), *model.named_buffers(recurse=False)]]
    if own:
        raise ValueError(
            f"the model holds tensors outside its top-level modules ({', '.join(own)}), so {split} cannot "
            "split it module by module; move them into a module of their own, or use strategy single, ddp "
            "or fsdp"
        )


def place(model: nn.Module, devices: Mapping[str, torch.device]) -> None:
    """Move each stage unit to its device, and its inputs there on every call."""
    top_level_only(model, "parallel.placement or model_parallel")
    for name, unit in stage_units(model):
        unit.to(devices[name])
        unit.register_forward_pre_hook(inputs_mover(devices[name]), with_kwargs=True)


def hybrid_devices(
    names: Sequence[str], placement: Mapping[str, DevicePlacement], device: torch.device
) -> dict[str, torch.device]:
    """Named modules where the spec puts them, the rest on the job's device. A CPU job has only the CPU.
    The planner checks a built-in model's names; a factory's model is checked here, once built."""
    for name in placement:
        if name not in names:
            raise refuse(
                "parallel.placement",
                f"parallel.placement names {name!r}, which the model does not have",
                f"use some of {', '.join(names)}",
            )
    cpu = torch.device("cpu")
    return {name: cpu if placement.get(name) is DevicePlacement.CPU else device for name in names}


def stage_devices(
    names: Sequence[str], split_at: Sequence[str], device: torch.device
) -> dict[str, torch.device]:
    """Stage i on the job's GPU i (its index among CUDA_VISIBLE_DEVICES); on a CPU job all on the CPU."""
    devices: dict[str, torch.device] = {}
    for index, group in enumerate(stage_groups(names, split_at)):
        stage = torch.device("cuda", index) if device.type == "cuda" else device
        devices.update(dict.fromkeys(group, stage))
    return devices

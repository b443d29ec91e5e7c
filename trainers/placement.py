"""One model over several devices in one process: each top-level module lives on a device of its own.

A forward pre-hook on each placed module moves its tensor inputs to that module's device, so the model's own
forward() runs unchanged and autograd carries gradients back across the boundaries. The same mechanism
serves model_parallel (stage i on GPU i) and hybrid CPU/GPU placement (an embedding table on the CPU, the
rest on the GPU). Keys of the state dict are untouched: placement wraps nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from trainers.data.batches import to_device
from trainers.problems import refuse
from trainers.spec import DevicePlacement
from trainers.stages import stage_groups

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
    """Move each top-level module to its device, and its inputs there on every call."""
    top_level_only(model, "parallel.placement or model_parallel")
    for name, child in model.named_children():
        child.to(devices[name])
        child.register_forward_pre_hook(inputs_mover(devices[name]), with_kwargs=True)


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

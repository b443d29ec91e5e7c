"""A copy of a checkpoint's state that training can go on beside, taken in milliseconds on its thread.

Training updates parameters and optimizer state in place, so a checkpoint written in the background must
first copy them. On a GPU with room for it the copy is a device-to-device clone (hundreds of MB in well
under a millisecond of GPU time), and the writer thread brings it to host memory on a side stream, so the
step that follows never waits for PCIe. Without that room, tensors go straight to pinned host memory by
non-blocking copies. Either way the copies are queued on each device's stream behind the step that produced
the state, and an event per device tells the writer when they have landed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

# A device clone needs this much free memory per byte it copies: the rest is slack for the steps after it.
CLONE_HEADROOM = 2


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """value with fn applied to every tensor in its dicts, lists and tuples."""
    if isinstance(value, dict):
        return {key: map_tensors(item, fn) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(map_tensors(item, fn) for item in value)
    return fn(value.detach()) if isinstance(value, torch.Tensor) else value


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, torch.Tensor):
        yield value


def _bytes_per_gpu(state: Any) -> dict[torch.device, int]:
    sizes: dict[torch.device, int] = {}
    for tensor in _tensors(state):
        if tensor.device.type == "cuda":
            sizes[tensor.device] = sizes.get(tensor.device, 0) + tensor.nelement() * tensor.element_size()
    return sizes


def _room_to_clone(sizes: dict[torch.device, int]) -> bool:
    return all(torch.cuda.mem_get_info(device)[0] >= CLONE_HEADROOM * size for device, size in sizes.items())


def _clone(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.device.type == "cuda" and tensor.layout == torch.strided:
        return tensor.clone()
    return tensor.to("cpu", copy=True)  # CPU tensors, and sparse state (rare and small): a plain copy


def _to_pinned(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.device.type != "cuda" or tensor.layout != torch.strided:
        return tensor.to("cpu", copy=True)
    host = torch.empty_like(tensor, device="cpu", pin_memory=True)
    return host.copy_(tensor, non_blocking=True)


@dataclass
class Snapshot:
    state: Any
    copied: list[torch.cuda.Event] = field(default_factory=list)  # one per GPU the copies were queued on

    @classmethod
    def take(cls, state: Any) -> Snapshot:
        sizes = _bytes_per_gpu(state)
        copy = _clone if sizes and _room_to_clone(sizes) else _to_pinned
        taken = map_tensors(state, copy)
        events = []
        for device in sizes:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device))
            events.append(event)
        return cls(taken, events)

    def on_host(self) -> Any:
        """The state with every tensor in host memory; blocks (off the training thread) until it is."""
        for event in self.copied:
            event.synchronize()
        streams: dict[torch.device, torch.cuda.Stream] = {}

        def to_host(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.device.type != "cuda":
                return tensor
            # A side stream: on the device's own stream the copy would wait behind, and hold up, training.
            stream = streams.setdefault(tensor.device, torch.cuda.Stream(tensor.device))
            # Fresh host memory is faulted in here, before the copy: faulting pages in during a pageable
            # copy held up the training thread's launches (ResNet-50 lost ~7 % of a 60-step window).
            host = torch.zeros_like(tensor, device="cpu")
            with torch.cuda.stream(stream):
                return host.copy_(tensor)

        return map_tensors(self.state, to_host)

"""Batches of whatever nesting a dataset yields: a tensor, or tuples, lists and dicts of them (and of numbers
or strings, which stay on the host). The built-in datasets yield (images, labels) pairs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainers.user_errors import UserCodeError

Batch = Any  # a tensor, or a tuple, list or dict nesting tensors
Counts = Callable[[], dict[str, int]]  # a rank's running counts of what its data reader met (bad samples)


def no_counts() -> dict[str, int]:
    return {}


def map_tensors(batch: Batch, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
    """The batch in the same nesting with `fn` applied to every tensor in it."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {key: map_tensors(value, fn) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple takes its fields positionally
        return type(batch)(*(map_tensors(value, fn) for value in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(map_tensors(value, fn) for value in batch)
    return batch


def to_device(batch: Batch, device: torch.device, non_blocking: bool) -> Batch:
    """The batch with every tensor on `device`; non_blocking copies are asynchronous from pinned memory."""
    return map_tensors(batch, lambda tensor: tensor.to(device, non_blocking=non_blocking))


def tensors(batch: Batch) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, dict):
        for value in batch.values():
            yield from tensors(value)
    elif isinstance(batch, list | tuple):
        for value in batch:
            yield from tensors(value)


def describe(batch: Batch) -> str:
    """What a batch is, for messages: its structure and the shapes in it."""
    if isinstance(batch, torch.Tensor):
        return f"a tensor of shape {list(batch.shape)}"
    if isinstance(batch, dict):
        return "a dict of " + ", ".join(f"{key}: {describe(value)}" for key, value in batch.items())
    if isinstance(batch, list | tuple):
        return f"a {type(batch).__name__} of " + ", ".join(describe(value) for value in batch)
    return f"a {type(batch).__name__}"


def batch_size(batch: Batch) -> int:
    """Samples in a batch: the first dimension of its first tensor that has one."""
    for tensor in tensors(batch):
        if tensor.dim():
            return tensor.shape[0]
    raise UserCodeError(
        f"a batch must hold a tensor with a batch dimension, and the data yields {describe(batch)}"
    )

"""Activations sent from one pipeline stage to the next, with their shape and dtype sent ahead.

The schedule carries activations during training; evaluation runs the stages without it (its batches vary
in size), so a receiving stage learns each tensor's shape from a fixed-size header first.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_HEADER = 8  # dtype, number of dimensions, and up to six sizes


def send_activation(tensor: torch.Tensor, dst: int) -> None:
    if tensor.dim() > _HEADER - 2 or tensor.dtype not in _DTYPES:
        raise ValueError(f"cannot send a {tensor.dim()}-d {tensor.dtype} activation between stages")
    header = torch.zeros(_HEADER, dtype=torch.int64, device=tensor.device)
    header[0], header[1] = _DTYPES.index(tensor.dtype), tensor.dim()
    header[2 : 2 + tensor.dim()] = torch.tensor(tensor.shape)
    dist.send(header, dst)
    dist.send(tensor.contiguous(), dst)


def receive_activation(src: int, device: torch.device) -> torch.Tensor:
    header = torch.empty(_HEADER, dtype=torch.int64, device=device)
    dist.recv(header, src)
    dtype, dims, *sizes = header.tolist()
    tensor = torch.empty(sizes[:dims], dtype=_DTYPES[dtype], device=device)
    dist.recv(tensor, src)
    return tensor

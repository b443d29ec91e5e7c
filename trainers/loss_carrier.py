"""The model and its loss as one module, for a wrapper that compiles only what it wraps.

DDP's forward runs outside dynamo (DistributedDataParallel._inside_ddp_forward disables it), and dynamo
compiles the wrapped module's forward split at the gradient buckets so that all-reduces overlap the
backward. A loss computed after the wrapper is then a graph of its own whose input is the logits, and its
backward writes the logits' gradient beside them: for GPT-2 a logits-sized tensor more at the peak
(bench/RESULTS.md, issue 48). nanoGPT computes the loss inside the module DDP wraps; so does this, for any
model, once the objective hands its loss over (trainers/objectives.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class LossCarrier(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None

    def forward(self, *args: Any, loss_target: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """The model's output; with loss_target (once a loss is handed over), the loss of that output."""
        output = self.model(*args, **kwargs)
        if loss_target is None:
            return output
        if self.loss is None:
            raise RuntimeError("hand the carrier a loss before asking it for one (Criterion.compile_loss)")
        # Placement may leave the output on another device than the batch (the last stage's).
        return self.loss(output, loss_target.to(output.device))

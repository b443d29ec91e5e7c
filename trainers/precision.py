"""Mixed precision composed into the loop: an autocast context, and a GradScaler only where fp16 needs one."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from jobspec.spec import Precision

_DTYPES = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}


class MixedPrecision:
    def __init__(self, precision: Precision, device: torch.device) -> None:
        self.precision = precision
        self.device = device
        # bf16 has fp32's exponent range, so its gradients do not underflow and need no loss scaling.
        self.scaler = torch.amp.GradScaler(device.type) if precision is Precision.FP16 else None
        # Weights cast once per autocast region and reused; a captured step (trainers/graphs.py) must not
        # keep such a cache across its capture, so it turns this off.
        self.cache_casts = True

    def autocast(self) -> AbstractContextManager[Any]:
        if self.precision is Precision.FP32:
            return nullcontext()
        return torch.autocast(
            device_type=self.device.type, dtype=_DTYPES[self.precision], cache_enabled=self.cache_casts
        )

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss if self.scaler is None else self.scaler.scale(loss)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Before clipping: the norm must be measured on true gradients, not scaled ones."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        # Skips the step when the scaled gradients overflowed, then adapts the scale.
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict[str, Any] | None:
        return None if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.scaler is not None and state is not None:
            self.scaler.load_state_dict(state)

"""The one interface every parallel strategy implements, in the spirit of Lightning Fabric's Strategy.

The loop only talks to this interface, so a new way of splitting work (dp, fsdp, pipeline, ...) is a new
file here and an entry in the registry, never an edit to the loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from enum import StrEnum

import torch
from torch import nn

from trainers.dist_env import DistEnv


class Reduce(StrEnum):
    SUM = "sum"
    MEAN = "mean"


class ParallelStrategy(ABC):
    def __init__(self, env: DistEnv) -> None:
        self.env = env
        self._module: nn.Module | None = None

    def setup(self, module: nn.Module) -> nn.Module:
        """Wrap the bare module (already on the device) for training; returns what the loop calls."""
        self._module = module
        return self.wrap(module)

    @abstractmethod
    def wrap(self, module: nn.Module) -> nn.Module: ...

    @abstractmethod
    def no_sync(self) -> AbstractContextManager[None]:
        """Context for accumulation micro-steps: gradients stay local until the last micro-step."""

    @abstractmethod
    def all_reduce(self, tensor: torch.Tensor, op: Reduce = Reduce.MEAN) -> torch.Tensor: ...

    @abstractmethod
    def barrier(self) -> None: ...

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Sharded strategies override this: the norm must then be reduced over the shards."""
        return nn.utils.clip_grad_norm_(self.unwrap().parameters(), max_norm)

    def unwrap(self) -> nn.Module:
        """The bare module, whose state_dict keys carry no wrapper prefixes."""
        if self._module is None:
            raise RuntimeError("call setup(module) before unwrap()")
        return self._module

    def teardown(self) -> None:
        """No rank leaves while another may still need it (rank 0 saving the final checkpoint)."""
        self.barrier()

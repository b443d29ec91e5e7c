"""Hogwild's main process: the model lives in shared memory, where worker processes update it lock-free.

Hogwild is the one strategy that does not run trainers/loop.py: its main process trains nothing and drives
worker processes instead (trainers/hogwild.py). To the loop's pieces it is one process on the CPU, so it
evaluates, checkpoints and resumes the shared model as single does.
"""

from __future__ import annotations

from torch import nn

from trainers.strategies.single import SingleDeviceStrategy


class HogwildStrategy(SingleDeviceStrategy):
    def wrap(self, module: nn.Module) -> nn.Module:
        # In place: parameters and buffers move to shared memory, and load_state_dict (resume) copies into
        # them, so every worker started afterwards sees the same tensors.
        return module.share_memory()

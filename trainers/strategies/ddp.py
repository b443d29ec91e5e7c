"""DistributedDataParallel: one full replica per process, gradients averaged during backward."""

from __future__ import annotations

from contextlib import AbstractContextManager

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainers.dist_env import DistEnv
from trainers.loss_carrier import LossCarrier
from trainers.strategies.process_group import GroupOptions, ProcessGroupStrategy


class DDPStrategy(ProcessGroupStrategy):
    def __init__(self, env: DistEnv, group: GroupOptions, sync_batchnorm: bool) -> None:
        super().__init__(env, group)
        if sync_batchnorm and env.device.type != "cuda":
            raise ValueError(
                "parallel.sync_batchnorm needs CUDA (torch's SyncBatchNorm has no CPU kernel); "
                "drop it for CPU jobs or ask for parallel.gpus"
            )
        self.sync_batchnorm = sync_batchnorm
        self._ddp: DistributedDataParallel | None = None

    def setup_module(self, module: nn.Module) -> nn.Module:
        # Converted before wrapping so that unwrap() and checkpoints see the SyncBatchNorm layers DDP trains.
        if self.sync_batchnorm:
            module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
        return super().setup_module(module)

    def wrap(self, module: nn.Module) -> nn.Module:
        device_ids = [self.env.device.index] if self.env.device.type == "cuda" else None
        # The loss inside the wrapped module's compiled forward, as nanoGPT has it (trainers/loss_carrier.py).
        self.loss_carrier = LossCarrier(module)
        # Gradients as views into DDP's buckets: the all-reduced bucket is the gradient, with no copy back
        # into .grad every step (the hand-written ceiling in bench/ does the same).
        self._ddp = DistributedDataParallel(
            self.loss_carrier, device_ids=device_ids, gradient_as_bucket_view=True
        )
        return self._ddp

    def no_sync(self) -> AbstractContextManager[None]:
        if self._ddp is None:
            raise RuntimeError("call setup_module(module) before no_sync()")
        return self._ddp.no_sync()

    def teardown(self) -> None:
        super().teardown()
        self._ddp = None

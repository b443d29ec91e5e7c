"""The one interface every parallel strategy implements, in the shape of Lightning Fabric's Strategy.

A strategy's life: setup_environment, setup_module, setup_optimizer; per step forward_backward (backward)
and optimizer_step; reduce_metrics at report steps; barrier; teardown. The loop only talks to this
interface, so a new way of splitting work (dp, fsdp, pipeline, ...) is a new file here and an entry in the
registry, never an edit to the loop. The defaults serve every strategy that runs the whole model's forward
in one process; pipeline overrides what it runs differently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from jobspec.spec import TrainSpec
from trainers.data.batches import Batch
from trainers.dist_env import DistEnv
from trainers.lora import check_loaded
from trainers.loss_carrier import LossCarrier
from trainers.objectives import LossValues, Objective
from trainers.placement import place, unit_names
from trainers.precision import MixedPrecision
from trainers.schedule import build_optimizer, sparse_parameters

Forward = Callable[..., Any]  # the module as the loop runs it: wrapped, maybe compiled


class ParallelStrategy(ABC):
    # Whether performance.compile may trace the loss into the compiled forward's graph, where the logits'
    # gradient can take the logits' memory (trainers/objectives.py). Not where a wrapper must be compiled on
    # its own: dynamo splits DDP's graph at its gradient buckets so that all-reduces overlap the backward.
    # Such a wrapper wraps a LossCarrier instead, which takes the loss inside the module it compiles.
    loss_in_forward_graph = False

    def __init__(self, env: DistEnv) -> None:
        self.env = env
        self._module: nn.Module | None = None
        self.loss_carrier: LossCarrier | None = None
        self.input_device = env.device  # where the loop delivers batches

    @abstractmethod
    def setup_environment(self) -> None:
        """Connect this rank to the others, before setup_module."""

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Put the bare module (built on the CPU) on its device(s) and wrap it; returns what the loop runs."""
        self._module = module
        names = unit_names(module)
        devices = self.device_map(names)
        if devices is None:
            module.to(self.env.device)
        else:
            place(module, devices)
            self.input_device = devices[names[0]]
        return self.wrap(module)

    def device_map(self, names: list[str]) -> dict[str, torch.device] | None:
        """A device per stage unit when the model spans devices; None keeps it whole on env.device."""
        return None

    @abstractmethod
    def wrap(self, module: nn.Module) -> nn.Module: ...

    def setup_optimizer(self, train: TrainSpec, lr: float) -> torch.optim.Optimizer:
        """The optimizer over the parameters this rank holds once wrapped: a stage's under pipeline, and
        under fsdp the shards that fully_shard put in place of the module's own parameters."""
        module = self.unwrap()
        # Frozen parameters (a LoRA job's model under its adapters) get no optimizer state.
        trained = [p for p in module.parameters() if p.requires_grad]
        return build_optimizer(trained, train, lr, self.env.device, sparse_parameters(module))

    def compiled(self, forward: Forward) -> Forward:
        """What the loop runs under performance.compile."""
        return torch.compile(forward)

    @abstractmethod
    def no_sync(self) -> AbstractContextManager[None]:
        """Context for accumulation micro-steps: gradients stay local until the last micro-step."""

    @property
    def data_env(self) -> DistEnv:
        """Who shares the data: ranks that split the batch. Stages of one pipeline all see the same batch."""
        return self.env

    def forward_backward(
        self, forward: Forward, batch: Batch, objective: Objective, precision: MixedPrecision, divisor: int
    ) -> LossValues:
        """One micro-step; backpropagates loss / divisor (scaled for fp16) and returns the detached values."""
        with precision.autocast():
            loss, metrics = objective(forward, batch)
        self.backward(precision.scale(loss / divisor))
        return LossValues(loss.detach(), {name: value.detach() for name, value in metrics.items()})

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, precision: MixedPrecision, clip_grad_norm: float | None
    ) -> None:
        """Clip (on unscaled gradients) when asked, update the parameters, and drop the gradients."""
        if clip_grad_norm is not None:
            precision.unscale(optimizer)
            self.clip_grad_norm(clip_grad_norm)
        precision.step(optimizer)
        optimizer.zero_grad(set_to_none=True)

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Scales the gradients so that their norm over the whole model is at most max_norm; returns the norm
        before clipping. Overridden where a rank holds only part of the gradients."""
        return nn.utils.clip_grad_norm_(self.unwrap().parameters(), max_norm)

    @abstractmethod
    def reduce_metrics(self, sums: torch.Tensor) -> torch.Tensor:
        """The job's totals of per-rank metric sums (summed losses, correct predictions, sample counts).

        A collective: every rank calls it at the same step with a tensor of the same shape, and every rank
        gets the same totals back (rank 0 reports them; every rank's plateau schedule reads eval_loss).
        Totals are sums, never means: ranks may hold unequal sample counts (uneven eval shards), so callers
        divide a summed loss by the summed count. The caller's tensor is left as it was.
        """

    @abstractmethod
    def barrier(self) -> None:
        """Returns once every rank has called it."""

    @torch.no_grad()
    def eval_sums(self, batch: Batch, objective: Objective, precision: MixedPrecision) -> torch.Tensor:
        """The objective's sums over one batch (samples, loss, metrics), on env.device. The bare module: a
        wrapper's forward may run collectives (DDP broadcasts buffers) that evaluation does not need."""
        with precision.autocast():
            sums = objective.eval_sums(self.unwrap(), batch)
        return sums.to(self.env.device)

    def full_state(self, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
        """The whole model's and optimizer's state as the bare model names them, complete on rank 0.
        A collective where state is spread over ranks: every rank calls it."""
        return self.unwrap().state_dict(), optimizer.state_dict()

    def load_full_state(
        self, model_state: dict[str, Any], optimizer_state: dict[str, Any], optimizer: torch.optim.Optimizer
    ) -> None:
        """The inverse of full_state, on every rank, from a checkpoint of any strategy; one may leave out
        frozen parameters, which the model's builder made as they were (trainers/lora.py)."""
        missing, unexpected = self.unwrap().load_state_dict(model_state, strict=False)
        check_loaded(self.unwrap(), missing, unexpected)
        optimizer.load_state_dict(optimizer_state)

    def unwrap(self) -> nn.Module:
        """The bare module, whose state_dict keys carry no wrapper prefixes."""
        if self._module is None:
            raise RuntimeError("call setup_module(module) before unwrap()")
        return self._module

    def teardown(self) -> None:
        """No rank leaves while another may still need it (rank 0 saving the final checkpoint)."""
        self.barrier()

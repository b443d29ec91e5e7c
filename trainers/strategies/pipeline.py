"""Pipeline parallelism: one process per stage, each batch cut into micro-batches that flow through the
stages so they compute at the same time (GPipe: all forwards, then all backwards).

A single process cannot overlap stages on fast GPUs (kernel launches from one Python thread dominate), so
each stage is its own torchrun rank, driven by torch.distributed.pipelining. Every rank builds the whole
model from the same seed and keeps only its stage's units (trainers/placement.py), registered under the
model's own names: state keys are the bare model's, and rank 0 gathers the stages' state into a
whole-model checkpoint.

Only the last stage computes the loss and predictions, so every metric comes from it: reduce_metrics
broadcasts the last stage's sums rather than summing the ranks', which would count each sample once per
stage. Joining the process group, barriers and teardown are ddp's and fsdp's (process_group.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

from jobspec.stages import FLATTEN_AFTER, stage_groups
from trainers.data.batches import Batch
from trainers.dist_env import DistEnv
from trainers.objectives import Criterion, LossValues, Objective
from trainers.optimizer_state import NamedOptimizerState, merge, to_indexed, to_named
from trainers.placement import stage_units, top_level_only, unit_names
from trainers.precision import MixedPrecision
from trainers.strategies.base import Forward
from trainers.strategies.process_group import GroupOptions, ProcessGroupStrategy
from trainers.strategies.stage_p2p import receive_activation, send_activation


class SequentialStage(nn.Module):
    """Consecutive stage units of a model, run one after another under the job's autocast."""

    def __init__(self, model: nn.Module, names: Sequence[str]) -> None:
        super().__init__()
        units = dict(stage_units(model))
        self._units = [(name, units[name]) for name in names]
        lists: dict[str, nn.ModuleDict] = {}
        for name, unit in self._units:
            # A ModuleList's item keeps its list's name and its index, so blocks.6's keys stay blocks.6's.
            parent, _, index = name.rpartition(".")
            if parent:
                self.add_module(parent, lists.setdefault(parent, nn.ModuleDict()))
                lists[parent][index] = unit
            else:
                self.add_module(name, unit)
        # Set per step: the schedule calls forward itself, and backward must run outside autocast.
        self.autocast: Callable[[], AbstractContextManager[Any]] = nullcontext
        self._layers: Forward = self._run_layers

    def compile_layers(self) -> None:
        """torch.compile this stage's modules: fused kernels, and far fewer launches per micro-batch, which
        bench/RESULTS.md's pipeline runs point to as what bounds an eager stage's thread."""
        self._layers = torch.compile(self._run_layers)

    def _run_layers(self, x: torch.Tensor) -> torch.Tensor:
        for name, module in self._units:
            x = module(x)
            if name == FLATTEN_AFTER:
                x = torch.flatten(x, 1)
        # Stage outputs travel by point-to-point send, which needs dense memory: a channels_last activation
        # is not contiguous in the default layout.
        return x.contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:
            # The gradient of a received activation goes back by point-to-point send too, and convolutions
            # in channels_last hand it back in that layout.
            x.register_hook(lambda grad: grad.contiguous())
        with self.autocast():
            return self._layers(x)


def share_overflow(precision: MixedPrecision) -> None:
    """fp16: when any stage's gradients overflow, every stage must skip the step, or their loss scales drift
    apart and later gradients arrive scaled by another stage's factor. FSDP's ShardedGradScaler all-reduces
    that verdict over the process group; it takes over the scaler's state (a resumed scale included)."""
    if precision.scaler is None or isinstance(precision.scaler, ShardedGradScaler):
        return
    shared = ShardedGradScaler(precision.device.type)
    shared.load_state_dict(precision.scaler.state_dict())
    precision.scaler = shared


def criterion(objective: Objective) -> Criterion:
    """The last stage computes the loss from its output and the batch's target alone; a loss that calls the
    whole model is refused at submit (jobspec/user_fit.py)."""
    if not isinstance(objective, Criterion):
        raise ValueError("parallel.strategy=pipeline runs train.loss cross_entropy or mse only")
    return objective


class PipelineStrategy(ProcessGroupStrategy):
    def __init__(self, env: DistEnv, group: GroupOptions, split_at: Sequence[str], microbatches: int) -> None:
        super().__init__(env, group)
        self.split_at = list(split_at)
        self.microbatches = microbatches
        self.is_first, self.is_last = env.rank == 0, env.rank == env.world_size - 1
        self._full_names: list[str] = []  # the whole model's parameter names, in its order
        self._stage: SequentialStage | None = None
        self._schedule: ScheduleGPipe | None = None
        self._precision: MixedPrecision | None = None
        self._criterion: Criterion | None = None
        self._divisor = 1

    def setup_module(self, module: nn.Module) -> nn.Module:
        top_level_only(module, "parallel.strategy=pipeline")
        groups = stage_groups(unit_names(module), self.split_at)
        if len(groups) != self.env.world_size:
            raise ValueError(
                f"parallel.split_at makes {len(groups)} stages but {self.env.world_size} processes run"
            )
        self._full_names = [name for name, _ in module.named_parameters()]
        self._stage = SequentialStage(module, groups[self.env.rank]).to(self.env.device)
        self._module = self._stage
        return self.wrap(self._stage)

    def wrap(self, module: nn.Module) -> nn.Module:
        stage = PipelineStage(module, self.env.rank, self.env.world_size, self.env.device)
        # scale_grads=False: the loss below already divides by the micro-batch count, on every torch.
        self._schedule = ScheduleGPipe(stage, self.microbatches, loss_fn=self._loss, scale_grads=False)
        return module

    def compiled(self, forward: Forward) -> Forward:
        """The schedule calls the stage itself, never the loop's forward: compile the stage's modules."""
        if self._stage is None:
            raise RuntimeError("call setup_module(module) before compiled()")
        self._stage.compile_layers()
        return forward

    @property
    def data_env(self) -> DistEnv:
        return DistEnv(rank=0, local_rank=self.env.local_rank, world_size=1, device=self.env.device)

    def _loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self._precision is None or self._criterion is None:
            raise RuntimeError("the pipeline computes a loss only inside forward_backward")
        # The schedule calls this outside the stage's autocast: the loss is computed in full precision.
        return self._precision.scale(self._criterion.loss(logits.float(), y) / self._loss_divisor)

    @property
    def _loss_divisor(self) -> int:
        return self._divisor * self.microbatches

    def forward_backward(
        self, forward: Forward, batch: Batch, objective: Objective, precision: MixedPrecision, divisor: int
    ) -> LossValues:
        """The schedule runs this stage's part of every micro-batch; the mean loss is the last stage's."""
        if self._schedule is None or self._stage is None:
            raise RuntimeError("call setup_module(module) before forward_backward()")
        share_overflow(precision)
        self._criterion = criterion(objective)
        x, y = self._criterion.split(batch)
        self._precision, self._divisor = precision, divisor
        self._stage.autocast = precision.autocast
        losses: list[torch.Tensor] = []
        args = (x,) if self.is_first else ()
        self._schedule.step(*args, target=y if self.is_last else None, losses=losses)
        # Also on stages without a loss: a GradScaler sets up its scale on its first scale() call, and
        # unscaling this stage's gradients needs it (equal on every stage, as overflows are shared).
        scale = precision.scale(torch.ones((), device=self.env.device))
        if not self.is_last:
            return LossValues(torch.zeros((), device=self.env.device), {})
        # The schedule reports what the loss function returned, one per micro-batch (some torch versions
        # call it once more to infer shapes, so counting calls would not do); undo the scaling.
        return LossValues(torch.stack(losses).detach().mean() * self._loss_divisor / scale, {})

    @torch.no_grad()
    def eval_sums(self, batch: Batch, objective: Objective, precision: MixedPrecision) -> torch.Tensor:
        """Stage by stage without micro-batches: evaluation needs no overlap, and its last batch may be
        smaller than the schedule's."""
        loss = criterion(objective)
        x, y = loss.split(batch)
        stage = self.unwrap()
        stage.autocast = precision.autocast  # type: ignore[assignment]
        h = stage(x if self.is_first else receive_activation(self.env.rank - 1, self.env.device))
        if not self.is_last:
            send_activation(h, self.env.rank + 1)
            return torch.zeros(loss.width, dtype=torch.float64, device=self.env.device)
        return loss.sums(h, y.to(h.device))

    def no_sync(self) -> AbstractContextManager[None]:
        return nullcontext()  # no replicas: gradients are never synchronised

    def reduce_metrics(self, sums: torch.Tensor) -> torch.Tensor:
        """Every stage sees the same samples, and only the last stage computes their loss and predictions
        (the others count the samples but hold zero losses): its sums are the totals, broadcast from it to
        every stage."""
        totals = sums.clone()
        dist.broadcast(totals, src=self.env.world_size - 1)
        return totals

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """The norm over every stage's gradients: each stage's squared norm, summed over the stages."""
        params = [p for p in self.unwrap().parameters() if p.grad is not None]
        grads = [p.grad for p in params if p.grad is not None]
        local = nn.utils.get_total_norm(grads) if grads else torch.zeros((), device=self.env.device)
        squared = local.float().pow(2).to(self.env.device)
        dist.all_reduce(squared, op=dist.ReduceOp.SUM)
        total = squared.sqrt()
        nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return total

    def full_state(self, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
        stage = self.unwrap()
        names = [name for name, _ in stage.named_parameters()]
        mine = (
            {key: value.cpu() for key, value in stage.state_dict().items()},
            to_named(optimizer.state_dict(), names).on_cpu(),
        )
        parts: list[Any] | None = [None] * self.env.world_size if self.env.is_main else None
        dist.gather_object(mine, parts, dst=0)
        if parts is None:
            return {}, {}
        model_state: dict[str, Any] = {}
        for part_state, _ in parts:
            model_state.update(part_state)
        return model_state, to_indexed(merge([named for _, named in parts]))

    def load_full_state(
        self, model_state: dict[str, Any], optimizer_state: dict[str, Any], optimizer: torch.optim.Optimizer
    ) -> None:
        stage = self.unwrap()
        keys = stage.state_dict().keys()
        missing = [key for key in keys if key not in model_state]
        if missing:
            raise ValueError(
                f"the checkpoint lacks {len(missing)} of this stage's tensors, e.g. {missing[0]}"
            )
        stage.load_state_dict({key: model_state[key] for key in keys})
        names = [name for name, _ in stage.named_parameters()]
        whole: NamedOptimizerState = to_named(optimizer_state, self._full_names)
        optimizer.load_state_dict(to_indexed(whole.restricted_to(names)))

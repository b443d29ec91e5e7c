"""Learning rate as a pure function of the step (and, for plateau, of the evaluations so far), and the
optimizer it drives."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from jobspec.spec import Optimizer, Schedule, TrainSpec


@dataclass(frozen=True)
class LrSchedule:
    base_lr: float  # already scaled by the plan's lr scaling rule
    schedule: Schedule
    warmup_steps: int
    total_steps: int
    steps_per_epoch: int
    step_size_epochs: int
    gamma: float
    onecycle_pct_start: float = 0.3  # TrainSpec's default
    min_lr: float = 0.0  # where cosine ends

    @classmethod
    def from_spec(
        cls, train: TrainSpec, base_lr: float, total_steps: int, steps_per_epoch: int
    ) -> LrSchedule:
        return cls(
            base_lr=base_lr,
            schedule=train.schedule,
            warmup_steps=train.warmup_steps,
            total_steps=total_steps,
            steps_per_epoch=steps_per_epoch,
            step_size_epochs=train.step_size_epochs,
            gamma=train.gamma,
            onecycle_pct_start=train.onecycle_pct_start,
            min_lr=train.min_lr,
        )


# torch's OneCycleLR defaults: start at peak/25, end at start/1e4.
ONECYCLE_DIV = 25.0
ONECYCLE_FINAL_DIV = 1e4


def _cosine_between(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1.0)


def onecycle_lr(step: int, steps: int, peak: float, pct_start: float) -> float:
    """torch's OneCycleLR (cosine annealing, two phases) at `step` of `steps`, computed the same way."""
    initial = peak / ONECYCLE_DIV
    rise_end = pct_start * steps - 1.0
    if step <= rise_end:
        return _cosine_between(initial, peak, step / rise_end if rise_end > 0 else 1.0)
    fall = (steps - 1.0) - rise_end
    pct = min(1.0, (step - rise_end) / fall) if fall > 0 else 1.0
    return _cosine_between(peak, initial / ONECYCLE_FINAL_DIV, pct)


def lr_at(step: int, s: LrSchedule, plateau_factor: float = 1.0) -> float:
    """The lr of the optimizer step taken after `step` steps are done (0-based). Warmup comes first; the
    schedule then spans the remaining steps. plateau_factor is what the plateau schedule has decayed to."""
    if step < s.warmup_steps:
        return s.base_lr * (step + 1) / s.warmup_steps
    after_warmup, remaining = step - s.warmup_steps, max(1, s.total_steps - s.warmup_steps)
    if s.schedule is Schedule.COSINE:
        return _cosine_between(s.base_lr, s.min_lr, min(1.0, after_warmup / remaining))
    if s.schedule is Schedule.STEP:
        epoch = step // s.steps_per_epoch
        return s.base_lr * s.gamma ** (epoch // s.step_size_epochs)
    if s.schedule is Schedule.ONECYCLE:
        return onecycle_lr(after_warmup, remaining, s.base_lr, s.onecycle_pct_start)
    if s.schedule is Schedule.PLATEAU:
        return s.base_lr * plateau_factor
    return s.base_lr


@dataclass(frozen=True)
class PlateauState:
    best: float = math.inf  # lowest eval_loss so far
    bad_evals: int = 0  # evaluations since it last improved
    factor: float = 1.0  # product of the decays so far


# torch's ReduceLROnPlateau default: a loss counts as better only below best * (1 - this).
PLATEAU_THRESHOLD = 1e-4
# The state rides in the optimizer's param groups, as torch's schedulers keep initial_lr there: the
# optimizer's state_dict then carries it into every checkpoint and back on resume, on every rank alike.
_PLATEAU_KEY = "plateau"


def plateau_after(state: PlateauState, eval_loss: float, patience: int, gamma: float) -> PlateauState:
    """Like ReduceLROnPlateau(mode="min"): decay once more than `patience` evaluations in a row fail to
    improve, then count afresh."""
    if eval_loss < state.best * (1.0 - PLATEAU_THRESHOLD):
        return PlateauState(best=eval_loss, bad_evals=0, factor=state.factor)
    if state.bad_evals + 1 > patience:
        return PlateauState(best=state.best, bad_evals=0, factor=state.factor * gamma)
    return PlateauState(best=state.best, bad_evals=state.bad_evals + 1, factor=state.factor)


def plateau_state(optimizer: torch.optim.Optimizer) -> PlateauState:
    saved = optimizer.param_groups[0].get(_PLATEAU_KEY)
    return PlateauState(**saved) if saved else PlateauState()


def observe_eval_loss(optimizer: torch.optim.Optimizer, train: TrainSpec, eval_loss: float) -> None:
    """Feed an evaluation to the plateau schedule; other schedules do not look at evaluations."""
    if train.schedule is not Schedule.PLATEAU:
        return
    state = plateau_after(plateau_state(optimizer), eval_loss, train.plateau_patience, train.gamma)
    for group in optimizer.param_groups:
        group[_PLATEAU_KEY] = asdict(state)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def sparse_parameters(module: torch.nn.Module) -> list[torch.Tensor]:
    """Weights of embeddings built with sparse=True: their gradients are sparse tensors."""
    embeddings = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    return [m.weight for m in module.modules() if isinstance(m, embeddings) and m.sparse]


def _sparse_sgd(
    params: Iterable[torch.nn.Parameter], sparse: list[torch.Tensor], train: TrainSpec, lr: float
) -> torch.optim.Optimizer:
    if train.optimizer is not Optimizer.SGD:
        raise ValueError(
            f"train.optimizer={train.optimizer} cannot take this model's sparse embedding gradients "
            "(Adam keeps two dense moments, tripling the table's memory); use train.optimizer sgd"
        )
    sparse_ids = {id(p) for p in sparse}
    dense = [p for p in params if id(p) not in sparse_ids]
    # The table gets plain SGD: torch has no sparse weight decay, a momentum buffer would grow into a dense
    # copy of the table, and the fused kernels take no sparse gradients.
    return torch.optim.SGD(
        [
            {"params": dense, "momentum": train.momentum, "weight_decay": train.weight_decay},
            {"params": sparse, "momentum": 0.0, "weight_decay": 0.0},
        ],
        lr=lr,
    )


def build_optimizer(
    params: Iterable[torch.nn.Parameter],
    train: TrainSpec,
    lr: float,
    device: torch.device,
    sparse: list[torch.Tensor] | None = None,
) -> torch.optim.Optimizer:
    """sparse: those of params whose gradients are sparse (see sparse_parameters)."""
    if sparse:
        return _sparse_sgd(params, sparse, train, lr)
    params = list(params)
    # On CUDA one fused kernel updates every parameter, instead of a launch per tensor. FSDP's parameters
    # are DTensor shards, and DTensor has no sharding rule for fused SGD: those take the foreach kernels.
    # DTensor's module is loaded only by fsdp jobs (importing it costs a start-up half a second): when it
    # is not loaded, no parameter can be one.
    dtensor = sys.modules.get("torch.distributed.tensor")
    sharded = dtensor is not None and any(isinstance(p, dtensor.DTensor) for p in params)
    fused = True if device.type == "cuda" and not sharded else None
    if train.optimizer is Optimizer.SGD:
        return torch.optim.SGD(
            params, lr=lr, momentum=train.momentum, weight_decay=train.weight_decay, fused=fused
        )
    if train.optimizer is Optimizer.ADAM:
        return torch.optim.Adam(
            params,
            lr=lr,
            betas=(train.betas[0], train.betas[1]),
            weight_decay=train.weight_decay,
            fused=fused,
        )
    return torch.optim.AdamW(
        decay_groups(params, train.weight_decay), lr=lr, betas=(train.betas[0], train.betas[1]), fused=fused
    )


def decay_groups(params: list[torch.nn.Parameter], weight_decay: float) -> list[dict[str, Any]]:
    """Decoupled weight decay on weight matrices (and embeddings) only: decaying a bias or a norm's scale
    pulls it toward 0, which regularises nothing and hurts (nanoGPT's and GPT-2's practice)."""
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]

"""One training step of the job's own model, traced under fake tensors on the CPU: the bytes each kind of
tensor holds at the step's peak (torch's MemTracker) and the FLOPs it runs (FlopCounterMode). The step is the
trainer's own (trainers/components.py builds the model, trainers/strategies the optimizer and the backward),
on one process as `single` runs it; what other strategies change per device is trainers/forecast/devices.py.

Traced on the CPU even for GPU jobs: a fake CUDA tensor's backward needs a CUDA context, which the API's host
has not. Byte counts do not depend on the device; which attention kernel runs does, and calibration covers it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from jobspec.catalog.archs import ARCHS, Arch
from jobspec.plan import RunConfig
from jobspec.spec import JobSpec, Precision
from trainers.components import LAYERS_KWARG, language_model, make_model
from trainers.data.batches import Batch
from trainers.forecast.batch import factory_batch, micro_batch, stand_in_data
from trainers.lm import LanguageModel
from trainers.models.hf import hf_layers, own_blocks
from trainers.objectives import Objective, build_objective
from trainers.performance import checkpoint_activations, convolutional
from trainers.precision import MixedPrecision
from trainers.schedule import build_optimizer, sparse_parameters
from trainers.strategies.fsdp import fsdp_units
from trainers.user_code import Bundle

CPU = torch.device("cpu")


class ModelKind(StrEnum):
    """What the step-time efficiency table is keyed by (trainers/forecast/calibration.py)."""

    TRANSFORMER = "transformer"
    ADAPTED = "adapted_transformer"  # most weights frozen (LoRA): many small adapter products
    CONVOLUTIONAL = "convolutional"
    OTHER = "other"


@dataclass(frozen=True)
class Phase:
    """The bytes each kind of tensor holds at one phase's peak of the step (MemTracker's categories)."""

    params: int
    buffers: int
    grads: int
    optimizer: int  # the optimizer's state, and its step's temporaries
    activations: int  # saved for backward
    temporaries: int  # everything else alive then
    total: int

    @classmethod
    def of(cls, tracker: MemTracker) -> Phase:
        peak = {
            str(name).rsplit(".", 1)[-1]: value
            for name, value in tracker.get_tracker_snapshot("peak")[CPU].items()
        }
        return cls(
            params=peak.get("PARAM", 0),
            buffers=peak.get("BUFFER", 0),
            grads=peak.get("GRAD", 0),
            optimizer=peak.get("OPT", 0),
            activations=peak.get("ACT", 0),
            temporaries=peak.get("TEMP", 0) + peak.get("OTH", 0),
            total=peak.get("Total", 0),
        )


@dataclass(frozen=True)
class Traced:
    """One rank's step as `single` would run it, in bytes, FLOPs and operations."""

    backward: Phase  # forward and backward of a micro-batch, at its peak
    update: Phase  # clipping and the optimizer's step, at its peak
    parameter_count: int  # frozen ones (LoRA's base model) too
    trained_count: int  # parameters the optimizer updates (LoRA: the adapters)
    flops_per_step: float  # forward and backward over every micro-batch of one optimizer step
    ops_per_step: int  # the operations torch dispatches in one step, which eager mode launches one by one
    shard_groups: int  # what fsdp would shard one at a time, the root among them
    kind: ModelKind
    # The parameters fsdp holds gathered at once, frozen ones too: the root's, which it keeps from the
    # forward through the backward, and its two largest groups (one computing, the next prefetched).
    gathered_count: int = 0

    @property
    def peak(self) -> Phase:
        return max(self.backward, self.update, key=lambda phase: phase.total)


@contextmanager
def tied_again(model: nn.Module) -> Iterator[None]:
    """Parameters shared by several modules (GPT-2's token embedding and output head) shared again after the
    block: to_empty gives each module its own, which would count their bytes, gradients and optimizer state
    twice (and their all-reduce under ddp)."""
    shared: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            shared.setdefault(id(param), []).append((module, name))
    yield
    for (first, first_name), *others in (holders for holders in shared.values() if len(holders) > 1):
        for module, name in others:
            setattr(module, name, getattr(first, first_name))


def trace(config: RunConfig, layers: int | None = None) -> Traced:
    """The step of the job's model, or of the same model with `layers` blocks."""
    spec, plan = config.spec, config.plan
    bundle = None if config.code_dir is None else Bundle(config.code_dir)
    # fp16 and bf16 hold the same bytes; fp16's scaler has no fake-tensor path worth tracing.
    precision = Precision.BF16 if plan.precision is Precision.FP16 else plan.precision
    collated = factory_batch(spec, plan, bundle)
    # Built on the meta device, then given fake storage: a fake parameter cannot be moved in place (a
    # Hugging Face model's adapters are moved to their base layer's device), a meta one can.
    with torch.device("meta"):
        data = stand_in_data(spec)
        model = make_model(spec, plan.strategy, data, bundle, layers)
    with FakeTensorMode(allow_non_fake_inputs=True):  # the meta parameters, which to_empty replaces
        with tied_again(model):
            model.to_empty(device=CPU)
        parameter_count = sum(p.numel() for p in model.parameters())
        parallel = own_blocks(spec.parallel, model)
        units = fsdp_units(model, parallel.wrap)
        gathered_count = gathered_at_once(model, units)
        frozen_as_buffers(model)
        kind = _kind(model, spec)
        shard_groups = len(units) + 1
        if spec.performance.activation_checkpointing:
            model = checkpoint_activations(model, parallel.wrap)
        trained = [p for p in model.parameters() if p.requires_grad]
        optimizer = build_optimizer(trained, spec.train, plan.lr, CPU, sparse_parameters(model))
        objective = build_objective(spec.train.loss, bundle, language_model=language_model(spec))
        mixed = MixedPrecision(precision, CPU)
        batch = micro_batch(spec, plan, data, collated)
        backward(model, batch, objective, mixed)  # the first step makes the optimizer's state
        update(model, optimizer, spec.train.clip_grad_norm)
        # The second runs as every later one does. Its two phases peak apart, each with its own tensors
        # (activations in the backward, the optimizer's temporaries in the update), and a deeper model can
        # move the step's peak from one to the other: each phase's peak is kept.
        with (
            _tracked(model, optimizer) as in_backward,
            FlopCounterMode(display=False) as flops,
            _Ops() as ops,
        ):
            backward(model, batch, objective, mixed)
        with _tracked(model, optimizer) as in_update:
            update(model, optimizer, spec.train.clip_grad_norm)
    micro_steps = max(1, math.ceil(plan.per_rank_batch / max(plan.micro_batch, 1)))
    return Traced(
        backward=Phase.of(in_backward),
        update=Phase.of(in_update),
        parameter_count=parameter_count,
        trained_count=sum(p.numel() for p in trained),
        flops_per_step=float(flops.get_total_flops()) * micro_steps,
        ops_per_step=ops.count * micro_steps,
        shard_groups=shard_groups,
        kind=kind,
        gathered_count=gathered_count,
    )


def gathered_at_once(model: nn.Module, units: list[nn.Module]) -> int:
    """Traced.gathered_count: each parameter counted in the innermost group holding it (fsdp_units lists
    inner groups first), the rest in the root's."""
    group_of: dict[int, int] = {}
    for index, unit in enumerate(units):
        for parameter in unit.parameters():
            group_of.setdefault(id(parameter), index)
    groups, root = [0] * len(units), 0
    for parameter in model.parameters():
        if id(parameter) in group_of:
            groups[group_of[id(parameter)]] += parameter.numel()
        else:
            root += parameter.numel()
    return root + sum(sorted(groups, reverse=True)[:2])


def frozen_as_buffers(model: nn.Module) -> None:
    """Frozen parameters (a LoRA job's base weights) as buffers: the same bytes, never a gradient, and
    MemTracker hooks every parameter for its gradient, which a frozen one cannot take."""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if not param.requires_grad:
                delattr(module, name)
                module.register_buffer(name, param.detach(), persistent=False)


def _kind(model: nn.Module, spec: JobSpec) -> ModelKind:
    if isinstance(model, LanguageModel) or language_model(spec):
        adapted = spec.inputs.model.lora is not None
        return ModelKind.ADAPTED if adapted else ModelKind.TRANSFORMER
    return ModelKind.CONVOLUTIONAL if convolutional(model) else ModelKind.OTHER


@contextmanager
def _tracked(model: nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[MemTracker]:
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        yield tracker


class _Ops(TorchDispatchMode):
    """Counts the operations that compute (a view computes nothing): an eager step launches a kernel or more
    for each, one after another from Python. TorchDispatchMode is torch's documented way to see them."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


def backward(model: nn.Module, batch: Batch, objective: Objective, mixed: MixedPrecision) -> None:
    """A micro-step as `single` runs it (trainers/strategies/base.py), on the bare model: no strategy, which
    would move it."""
    with mixed.autocast():
        loss, _ = objective(model, batch)
    loss.backward()


def update(model: nn.Module, optimizer: torch.optim.Optimizer, clip_grad_norm: float | None) -> None:
    if clip_grad_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def model_layers(spec: JobSpec) -> int | None:
    """The repeated blocks of a language model (gpt's n_layer, a Hugging Face config's decoder layers);
    None for a model traced whole."""
    model = spec.inputs.model
    if model.arch is Arch.HF_CAUSAL_LM:
        return hf_layers(model)
    if model.arch is not None and ARCHS[model.arch].language_model:
        default = ARCHS[model.arch].kwargs[LAYERS_KWARG].default
        return int(model.arch_kwargs.get(LAYERS_KWARG, default))
    return None


def traced_step(config: RunConfig) -> Traced:
    """The job's step. A language model's blocks are alike, and tracing costs each operation times the
    tensors alive: its step is traced with one block and with two, and every figure of each phase extended
    to its depth (each is a sum over the blocks plus what lies outside them)."""
    layers = model_layers(config.spec)
    if layers is None or layers <= 2:
        return trace(config)
    one, two = trace(config, 1), trace(config, 2)

    def extend(first: int | float, second: int | float) -> Any:
        return first + (layers - 1) * (second - first)

    def phase(first: Phase, second: Phase) -> Phase:
        return Phase(**{name: extend(getattr(first, name), getattr(second, name)) for name in PHASE_FIELDS})

    return Traced(
        backward=phase(one.backward, two.backward),
        update=phase(one.update, two.update),
        **{name: extend(getattr(one, name), getattr(two, name)) for name in STEP_FIELDS},
        kind=one.kind,
        gathered_count=two.gathered_count,  # two blocks already hold the two largest groups
    )


PHASE_FIELDS = tuple(field.name for field in fields(Phase))
STEP_FIELDS = ("parameter_count", "trained_count", "flops_per_step", "ops_per_step", "shard_groups")

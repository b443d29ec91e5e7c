"""Fully sharded data parallel (FSDP2's fully_shard): each rank keeps 1/N of every parameter, gradient and
optimizer state. A block's parameters are all-gathered just before its forward and backward and freed after;
gradients are reduce-scattered. Runs on CUDA with NCCL and on the CPU with gloo.

Under bf16, FSDP's MixedPrecisionPolicy gathers each block's parameters in bf16 and reduce-scatters its
gradients in fp32, as torchtitan does: half the bytes of every all-gather, while the shards, the optimizer
and its state stay fp32. Autocast still runs around the forward for the ops it keeps in fp32 (the loss,
softmax, norms). fp16 and fp32 leave the policy at fp32: fp16's narrow range is guarded by autocast's per-op
casts and the GradScaler, whose inf check DTensor reduces over the shards.

With one rank a shard is the whole model, so nothing is sharded: the model trains as `single` trains it, with
the same checkpoints as a sharded run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.modules.batchnorm import _BatchNorm

from trainers.blocks import blocks
from trainers.dist_env import DistEnv
from trainers.lora import check_loaded
from trainers.strategies.process_group import GroupOptions, ProcessGroupStrategy

_GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)
# Not strict: a LoRA checkpoint leaves out the frozen model (check_loaded allows that alone).
_SCATTER = StateDictOptions(full_state_dict=True, strict=False)


def _has_params(module: nn.Module) -> bool:
    return next(module.parameters(), None) is not None


def shard_units(model: nn.Module) -> list[nn.Module]:
    """What FSDP gathers one at a time: the model's children, and the blocks inside a stage of blocks (a
    ResNet layer, a Sequential of conv blocks), so at most one block's full parameters live at once."""
    units: list[nn.Module] = []
    for child in model.children():
        if not _has_params(child):
            continue
        blocks = [b for b in child.children() if _has_params(b)]
        is_stage = isinstance(child, nn.Sequential | nn.ModuleList) and blocks
        if is_stage and all(next(b.children(), None) is not None for b in blocks):
            units += blocks
        else:
            units.append(child)
    return units


def fsdp_units(module: nn.Module, wrap: Sequence[str] | None) -> list[nn.Module]:
    """The model's blocks (parallel.wrap, or its largest ModuleList's children), else shard_units; inner
    units before the units holding them, as fully_shard needs (the classes of parallel.wrap may nest)."""
    found = blocks(module, wrap)
    if found is None:
        return shard_units(module)
    return found[::-1] if wrap else found


def dense_embeddings(model: nn.Module) -> None:
    """Sparse gradients have no sharded form (FSDP reduce-scatters dense ones), so embeddings built with
    sparse=True train with dense gradients here; the flag is read at each forward."""
    for module in model.modules():
        if isinstance(module, nn.Embedding | nn.EmbeddingBag):
            module.sparse = False


def holds_batch_norm(module: nn.Module, inner_units: Sequence[nn.Module] = ()) -> bool:
    """Whether a batch norm is among the modules whose parameters this unit shards: its own, less those of
    the units inside it, which shard theirs."""
    inner = {id(m) for unit in inner_units for m in unit.modules()}
    return any(isinstance(m, _BatchNorm) and id(m) not in inner for m in module.modules())


def indexed_optimizer_state(named: dict[str, Any]) -> dict[str, Any]:
    """torch.distributed.checkpoint keys optimizer state by parameter name; torch.optim numbers parameters
    group by group. Converted so that an fsdp checkpoint loads into single and ddp optimizers as is."""
    index: dict[str, int] = {}
    groups = []
    for group in named["param_groups"]:
        groups.append({**group, "params": [index.setdefault(name, len(index)) for name in group["params"]]})
    return {"state": {index[name]: s for name, s in named["state"].items()}, "param_groups": groups}


def named_optimizer_state(
    indexed: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """The inverse of indexed_optimizer_state, naming parameters in the order this optimizer holds them."""
    name_of = {id(p): name for name, p in model.named_parameters()}
    names = [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in indexed["param_groups"]]
    return {"state": {names[i]: s for i, s in indexed["state"].items()}, "param_groups": groups}


def contiguous_parameters(module: nn.Module) -> None:
    """FSDP shards flat, contiguous parameters only: a convolution's weight that performance.channels_last
    laid out channels-last goes back to the default layout (its activations stay channels-last, and the
    convolution takes the weight in either)."""
    for parameter in module.parameters():
        if not parameter.is_contiguous():
            parameter.data = parameter.data.contiguous()


class FSDPStrategy(ProcessGroupStrategy):
    """ddp's sibling: the same process group and metric totals, but each rank keeps a shard, not a replica."""

    def __init__(
        self,
        env: DistEnv,
        group: GroupOptions,
        wrap: Sequence[str] | None = None,
        param_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(env, group)
        self.block_classes = wrap
        self.param_dtype = param_dtype  # what the blocks compute in; None: their own (fp32)
        self._root: FSDPModule | None = None

    def units(self, module: nn.Module) -> list[nn.Module]:
        return fsdp_units(module, self.block_classes)

    def wrap(self, module: nn.Module) -> nn.Module:
        dense_embeddings(module)
        if self.env.world_size == 1:
            # Sharding over one rank saves no memory and costs time: a copy of every parameter before each
            # block's forward and backward, a copy of every gradient after, and DTensor parameters, which take
            # the optimizers' unfused kernels (0.93x single's tokens/s for a 1.1B Llama, bench/RESULTS.md).
            self.loss_in_forward_graph = True  # the bare module, as under single
            return module
        contiguous_parameters(module)
        mesh = init_device_mesh(self.env.device.type, (self.env.world_size,))
        units = self.units(module)
        for unit in units:
            fully_shard(unit, mesh=mesh, mp_policy=self.policy(unit))
        # The root takes the parameters no unit holds (a ResNet's stem, a lone head) and drives the others.
        self._root = fully_shard(module, mesh=mesh, mp_policy=self.policy(module, units))
        return module

    def policy(self, unit: nn.Module, inner_units: Sequence[nn.Module] = ()) -> MixedPrecisionPolicy:
        """param_dtype for the unit's gathered parameters, fp32 for its reduced gradients. A unit holding a
        batch norm keeps fp32: FSDP casts parameters, not buffers, and batch norm's kernels refuse weights of
        another dtype than its fp32 running statistics."""
        if self.param_dtype is None or holds_batch_norm(unit, inner_units):
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=self.param_dtype, reduce_dtype=torch.float32)

    def no_sync(self) -> AbstractContextManager[None]:
        if self.env.world_size == 1:  # unsharded: gradients never leave this rank
            return nullcontext()
        return self._local_gradients()

    @contextmanager
    def _local_gradients(self) -> Iterator[None]:
        if self._root is None:
            raise RuntimeError("call setup_module(module) before no_sync()")
        self._root.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self._root.set_requires_gradient_sync(True)

    def full_state(self, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
        """Gathered to rank 0's CPU memory one tensor at a time; other ranks get empty dicts."""
        model = self.unwrap()
        model_state = get_model_state_dict(model, options=_GATHER)
        optimizer_state = get_optimizer_state_dict(model, optimizer, options=_GATHER)
        if not self.env.is_main:
            return model_state, optimizer_state
        return model_state, indexed_optimizer_state(optimizer_state)

    def load_full_state(
        self, model_state: dict[str, Any], optimizer_state: dict[str, Any], optimizer: torch.optim.Optimizer
    ) -> None:
        """Every rank holds the whole checkpoint and keeps its own shard of each tensor."""
        model = self.unwrap()
        missing, unexpected = set_model_state_dict(model, model_state, options=_SCATTER)
        check_loaded(model, missing, unexpected)
        named = named_optimizer_state(optimizer_state, model, optimizer)
        set_optimizer_state_dict(model, optimizer, named, options=_SCATTER)

    def teardown(self) -> None:
        super().teardown()
        self._root = None

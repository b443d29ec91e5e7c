"""Speed and memory switches of the performance section: activation checkpointing, cuDNN autotuning and
channels_last."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from jobspec.spec import PerformanceSpec
from trainers.blocks import blocks, outermost

_ACTIVATIONS = (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh)
_POOLS = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)


def set_cudnn_benchmark(
    performance: PerformanceSpec, device: torch.device, *, replicas_in_threads: bool = False
) -> None:
    """Autotuning picks the fastest convolution kernels for the shapes it sees; with the fixed batch shapes
    of this loop it pays off after the first steps. It has no meaning on the CPU.

    Off where replicas run in threads made afresh every step (DataParallel): cuDNN's v8 API keeps the
    autotuned plans per thread (pytorch#191744), so every step would autotune again. Measured on H200s with
    it on: DataParallel at 1/40 of one GPU's speed per step."""
    wanted = performance.cudnn_benchmark and not replicas_in_threads
    torch.backends.cudnn.benchmark = wanted and device.type == "cuda"


@contextmanager
def _batchnorm_stats_kept(module: nn.Module) -> Iterator[None]:
    """Recomputing a block runs BatchNorm's forward again, which would update its running statistics a
    second time; they are put back as they were afterwards. (Switching tracking off instead would change
    what BatchNorm saves for backward, which checkpointing refuses.)"""
    buffers = [
        b
        for m in module.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
        for b in (m.running_mean, m.running_var, m.num_batches_tracked)
        if b is not None
    ]
    saved = [b.clone() for b in buffers]
    try:
        yield
    finally:
        with torch.no_grad():
            for b, old in zip(buffers, saved, strict=True):
                b.copy_(old)


def convolutional(model: nn.Module) -> bool:
    """channels_last only changes how 4-D activations are laid out, which 2-D convolutions produce."""
    return any(isinstance(module, nn.Conv2d) for module in model.modules())


def recompute_contexts(
    module: nn.Module,
) -> tuple[AbstractContextManager[None], AbstractContextManager[None]]:
    """The forward as usual; the recomputation without a second update of BatchNorm's statistics."""
    return nullcontext(), _batchnorm_stats_kept(module)


def checkpoint_forward(module: nn.Module) -> None:
    """Recompute this module's activations in backward. Its forward is replaced on the instance, so the
    module, its class and its state_dict keys stay as they were: strategies and checkpoints see no wrapper."""
    forward = module.forward
    keeps_stats = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())

    def contexts() -> tuple[AbstractContextManager[None], AbstractContextManager[None]]:
        return recompute_contexts(module)

    def recomputed(*args: Any, **kwargs: Any) -> Any:
        # Non-reentrant checkpointing also restores the RNG, so dropout recomputes the same mask. Under
        # torch.compile a context_fn must be a pair of TorchDispatchModes, so a compiled BatchNorm block
        # updates its running statistics again as it recomputes (their momentum sees each batch twice).
        if keeps_stats and not torch.compiler.is_compiling():
            return checkpoint(forward, *args, use_reentrant=False, context_fn=contexts, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    module.forward = recomputed


def segment_ends(layers: list[nn.Module]) -> list[int]:
    """Exclusive end indices of the blocks: a block closes after an activation or a nested block (a
    residual block, a conv-BN-ReLU Sequential), and a pooling layer right after joins the block it pools."""
    ends: list[int] = []
    for i, layer in enumerate(layers):
        if isinstance(layer, _POOLS) and ends and ends[-1] == i:
            ends[-1] = i + 1
        elif isinstance(layer, _ACTIVATIONS) or any(True for _ in layer.children()):
            ends.append(i + 1)
    if not ends or ends[-1] != len(layers):
        ends.append(len(layers))
    return ends


class CheckpointedSequential(nn.Sequential):
    """A Sequential that keeps only each block's input in the forward pass and recomputes the rest in the
    backward pass. Its children and their names are the original's, so state_dict keys do not change."""

    def __init__(self, original: nn.Sequential) -> None:
        super().__init__(OrderedDict(original.named_children()))
        self.ends = segment_ends(list(self))

    def _run(self, start: int, end: int, x: torch.Tensor) -> torch.Tensor:
        for layer in list(self)[start:end]:
            x = layer(x)
        return x

    def _contexts(self) -> tuple[AbstractContextManager[None], AbstractContextManager[None]]:
        return recompute_contexts(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = 0
        for end in self.ends:
            # Non-reentrant checkpointing also restores the RNG, so dropout recomputes the same mask.
            x = checkpoint(self._run, start, end, x, use_reentrant=False, context_fn=self._contexts)
            start = end
        return x


def checkpoint_activations(model: nn.Module, wrap: Sequence[str] | None = None) -> nn.Module:
    """Recompute activations in backward, block by block: each block of parallel.wrap's classes or of the
    model's largest ModuleList (trainers/blocks.py); else the model itself when it is a plain Sequential (mlp,
    small_cnn), else its Sequential children (a ResNet's layer1-4, AlexNet's and VGG's features and
    classifier). Returns the model to use, which is a new object only for a plain Sequential."""
    found = blocks(model, wrap)
    if found is not None:
        for block in outermost(found):
            checkpoint_forward(block)
        return model
    if type(model) is nn.Sequential:
        return CheckpointedSequential(model)
    targets = [name for name, child in model.named_children() if type(child) is nn.Sequential]
    if not targets:
        raise ValueError(
            f"performance.activation_checkpointing does not know the blocks of {type(model).__name__}; "
            "name their classes in parallel.wrap, or turn it off for this model"
        )
    for name in targets:
        setattr(model, name, CheckpointedSequential(getattr(model, name)))
    return model

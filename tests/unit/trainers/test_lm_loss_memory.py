"""A language model's loss without fp32 copies of its logits (issue 34): under performance.compile the
next-token loss is compiled, in one graph with the model's forward where the strategy allows it, and gives
the eager loss and gradients; evaluation casts the logits to fp32 a chunk at a time, to the same sums."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.utils._python_dispatch import TorchDispatchMode

from trainers import objectives
from trainers.dist_env import DistEnv
from trainers.models import build_model
from trainers.objectives import IGNORE_INDEX, NextTokenCrossEntropy
from trainers.strategies.base import ParallelStrategy
from trainers.strategies.ddp import DDPStrategy
from trainers.strategies.process_group import GroupOptions
from trainers.strategies.single import SingleDeviceStrategy

VOCAB = 32


def step_gradients(objective: NextTokenCrossEntropy, compiled: bool) -> tuple[float, list[torch.Tensor]]:
    """A tiny gpt's loss and gradients on one batch, its model compiled or eager."""
    torch.manual_seed(0)
    kwargs = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8}
    model = build_model("gpt", kwargs, 0, VOCAB, 0, vocab_size=VOCAB)
    ids = torch.randint(0, VOCAB, (2, 9))
    loss, _ = objective(torch.compile(model) if compiled else model, (ids[:, :-1], ids[:, 1:]))
    loss.backward()
    return loss.item(), [p.grad for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("with_forward", [True, False])
def test_the_compiled_loss_gives_the_eager_loss_and_gradients(
    with_forward: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What is ours: the loss captured in one graph, its forward's or its own, with no break, and its autograd
    # traced ahead (aot_eager runs that graph). Inductor's C++ code for a CPU took minutes of both cores in
    # the suite; its kernels are torch's to test, and tests/gpu/test_gpt_gpu.py trains GPT compiled on a GPU.
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    eager_loss, eager_grads = step_gradients(NextTokenCrossEntropy(), compiled=False)
    objective = NextTokenCrossEntropy()
    objective.compile_loss(with_forward)
    counters.clear()
    # Apart from the forward, the loss compiles alone (the model left eager keeps the test short).
    loss, grads = step_gradients(objective, compiled=with_forward)
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
    assert loss == pytest.approx(eager_loss, rel=1e-5)
    for grad, expected in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(("strategy", "together"), [(SingleDeviceStrategy, True), (DDPStrategy, False)])
def test_only_a_bare_module_takes_the_loss_into_its_graph(
    strategy: type[ParallelStrategy], together: bool
) -> None:
    assert strategy.loss_in_forward_graph is together


def test_under_ddp_the_wrapped_module_computes_the_loss_in_its_compiled_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # DDP's forward runs outside dynamo, so a loss after it was a graph of its own whose input is the logits
    # (issue 48); through the carrier, the graph dynamo compiles for the wrapped module returns the loss.
    outputs: list[list[torch.Size]] = []

    def recording(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
        shapes = [node.meta["example_value"].shape for node in gm.graph.output_node().args[0]]
        outputs.append(shapes)
        return gm.forward

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=recording))
    eager_loss, eager_grads = step_gradients(NextTokenCrossEntropy(), compiled=False)
    torch.manual_seed(0)
    kwargs = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8}
    model = build_model("gpt", kwargs, 0, VOCAB, 0, vocab_size=VOCAB)
    ids = torch.randint(0, VOCAB, (2, 9))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        env = DistEnv(0, 0, 1, torch.device("cpu"))
        strategy = DDPStrategy(env, GroupOptions("gloo", timedelta(seconds=60)), False)
        forward = strategy.compiled(strategy.setup_module(model))
        objective = NextTokenCrossEntropy()
        objective.compile_loss(strategy.loss_in_forward_graph, strategy.loss_carrier)
        loss, _ = objective(forward, (ids[:, :-1], ids[:, 1:]))
        loss.backward()
    finally:
        dist.destroy_process_group()
    # One graph from the ids to the loss: no graph hands the (2, 8, VOCAB) logits on to another.
    assert outputs == [[torch.Size([])]]
    assert loss.item() == pytest.approx(eager_loss, rel=1e-5)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    for grad, expected in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6)


class LargestFloat32(TorchDispatchMode):
    """The most elements of any fp32 tensor an op returned while it was active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                self.largest = max(self.largest, t.numel())
        return out


def test_evaluation_casts_the_logits_to_fp32_a_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, 16, VOCAB, dtype=torch.bfloat16)
    target = torch.randint(0, VOCAB, (4, 16))
    target[3, 10:] = IGNORE_INDEX
    monkeypatch.setattr(objectives, "EVAL_CHUNK_ELEMENTS", 10 * VOCAB, raising=False)
    with LargestFloat32() as seen:
        tokens, summed = NextTokenCrossEntropy().sums(logits, target).tolist()
    assert seen.largest <= 10 * VOCAB  # of the batch's 64 x VOCAB
    assert tokens == 58
    flat = logits.flatten(0, 1).float()
    expected = F.cross_entropy(flat, target.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    assert summed == pytest.approx(expected.item(), rel=1e-6)

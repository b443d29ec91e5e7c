"""Activation checkpointing recomputes blocks in backward and changes neither gradients nor state."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainers.models import build_model
from trainers.performance import CheckpointedSequential, checkpoint_activations, segment_ends

CASES = [("mlp", 1, 8), ("small_cnn", 3, 16), ("resnet18", 3, 32), ("alexnet", 3, 63)]


def _first_checkpointed_layer(model: nn.Module) -> str:
    block = next(m for m in model.modules() if isinstance(m, CheckpointedSequential))
    layer = next(m for m in block.modules() if isinstance(m, nn.Conv2d | nn.Linear))
    return next(name for name, m in model.named_modules() if m is layer)


def _forward_calls(model: nn.Module, name: str) -> list[int]:
    """A counter of the named layer's forward calls."""
    calls = [0]

    def count(*_: object) -> None:
        calls[0] += 1

    model.get_submodule(name).register_forward_hook(count)
    return calls


def _train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    torch.manual_seed(1)  # the same dropout masks in both models
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.item(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch, channels, size", CASES)
def test_gradients_and_state_equal_the_plain_models(arch: str, channels: int, size: int) -> None:
    torch.manual_seed(0)
    plain = build_model(arch, {}, channels, 10, size)
    checkpointed = checkpoint_activations(copy.deepcopy(plain))
    layer = _first_checkpointed_layer(checkpointed)
    plain_calls, checkpointed_calls = _forward_calls(plain, layer), _forward_calls(checkpointed, layer)
    x, y = torch.randn(4, channels, size, size), torch.randint(10, (4,))

    loss, grads = _train_step(plain, x, y)
    loss_ckpt, grads_ckpt = _train_step(checkpointed, x, y)

    assert loss_ckpt == loss
    assert grads.keys() == grads_ckpt.keys() and len(grads) == len(list(plain.parameters()))
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=0, atol=0, msg=name)
    # BatchNorm's running statistics moved once, not twice, and state_dict keys are unchanged.
    assert list(checkpointed.state_dict()) == list(plain.state_dict())
    for key, value in plain.state_dict().items():
        assert torch.equal(checkpointed.state_dict()[key], value), key
    # The block was really recomputed in backward: its layers ran twice.
    assert (plain_calls[0], checkpointed_calls[0]) == (1, 2)


def test_blocks_end_after_activations_and_take_the_pooling_that_follows() -> None:
    layers: list[nn.Module] = [nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 4, 3), nn.ReLU()]
    layers += [nn.Flatten(), nn.Linear(4, 2)]
    assert segment_ends(layers) == [3, 5, 7]


def test_a_model_without_sequential_blocks_is_refused() -> None:
    class Bare(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(2, 2)

    with pytest.raises(ValueError, match="activation_checkpointing"):
        checkpoint_activations(Bare())

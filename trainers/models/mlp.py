"""A plain multi-layer perceptron over flattened images."""

from __future__ import annotations

from torch import nn


def build_mlp(in_channels: int, num_classes: int, image_size: int, hidden: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_channels * image_size * image_size
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)

"""A small convolutional net with BatchNorm, so that sync_batchnorm has something to convert."""

from __future__ import annotations

from torch import nn


def _block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(),
    )


def build_small_cnn(in_channels: int, num_classes: int, image_size: int, channels: int) -> nn.Module:
    # Adaptive pooling makes the head independent of image_size, so any size from the spec works.
    return nn.Sequential(
        _block(in_channels, channels),
        nn.MaxPool2d(2),
        _block(channels, channels * 2),
        nn.MaxPool2d(2),
        _block(channels * 2, channels * 4),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels * 4, num_classes),
    )

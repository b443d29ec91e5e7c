"""torchvision classifiers, always built from scratch: a run never downloads weights.

torchvision is imported on use: loading it costs seconds of startup that jobs on the small models would pay
on every rank for nothing.
"""

from __future__ import annotations

from torch import nn


def build_alexnet(in_channels: int, num_classes: int, image_size: int, dropout: float) -> nn.Module:
    from torchvision.models import alexnet

    return alexnet(weights=None, num_classes=num_classes, dropout=dropout)


def build_resnet18(in_channels: int, num_classes: int, image_size: int) -> nn.Module:
    from torchvision.models import resnet18

    return resnet18(weights=None, num_classes=num_classes)


def build_resnet50(in_channels: int, num_classes: int, image_size: int) -> nn.Module:
    from torchvision.models import resnet50

    return resnet50(weights=None, num_classes=num_classes)


def build_vgg11(in_channels: int, num_classes: int, image_size: int, dropout: float) -> nn.Module:
    from torchvision.models import vgg11

    return vgg11(weights=None, num_classes=num_classes, dropout=dropout)

"""Bring your own model: a code bundle whose model, data and loss Trainyard trains under any strategy.

The bundle is this directory: `models.py` (a model factory and a loss) and `data.py` (a data factory). A
job names their functions as `module:function` and gets the bundle by its id:

    $ trainyard code push examples/byom          # prints sha256:...
    $ # put that id in spec.json's "code" (it holds the placeholder "<from trainyard code push>")
    $ trainyard submit examples/byom/spec.json --follow
    $ # or both at once: trainyard submit examples/byom/spec.json --code examples/byom --follow

What Trainyard calls, on every rank, inside the job (the API never imports the bundle):

- `model.factory` -> `build(**model.kwargs)`: an `nn.Module`. Every rank calls it with the same seed, so
  replicas start equal. Its top-level modules (`features`, `flatten`, `head`) are what
  `parallel.split_at` and `parallel.placement` name; pipeline runs them one after another, so `forward`
  below does exactly that and nothing else.
- `data.factory` -> `data.build(**data.kwargs)`: `(train, val)` torch Datasets (see data.py).
- `train.loss` -> `loss(model, batch)`: the batch's mean loss and metrics to report next to it.

A failure in any of them (an import error, an exception, a wrong return type) fails the job at once with
the reason `user_code_error` and the traceback's lines in this bundle. See docs/spec.md, "User code".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, channels: int, classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.flatten = nn.Flatten()
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.flatten(self.features(images)))


def build(channels: int = 16, classes: int = 10) -> nn.Module:
    return SmallCNN(channels, classes)


def loss(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Cross entropy, with the batch's accuracy reported as `accuracy` (and `eval_accuracy`)."""
    images, labels = batch
    logits = model(images)
    accuracy = (logits.argmax(1) == labels).float().mean()
    return F.cross_entropy(logits, labels), {"accuracy": accuracy}

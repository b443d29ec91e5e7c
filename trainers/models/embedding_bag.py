"""A bag-of-tokens classifier: the mean of a bag's embeddings, then a small MLP head.

The table is the whole model at recommender sizes (10,000,000 x 150 is 6 GB of fp32), so its gradients are
sparse: a step touches and sends only the rows the batch used, and plain SGD updates just those rows. That is
what keeps such a table trainable in CPU memory, and what parallel.placement {"embedding": "cpu"} relies on
when the head trains on a GPU.
"""

from __future__ import annotations

import torch
from torch import nn


class EmbeddingBagClassifier(nn.Module):
    def __init__(self, vocab_size: int, num_classes: int, embedding_dim: int, hidden: int) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embedding_dim, mode="mean", sparse=True)
        self.classifier = nn.Sequential(
            nn.Linear(embedding_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # A 2-D int64 batch is B bags of equal size. Under parallel.placement, hooks move each module's
        # inputs to its device, so the table can stay on the CPU while the head runs on a GPU.
        return self.classifier(self.embedding(tokens))


def build_embedding_bag(vocab_size: int, num_classes: int, embedding_dim: int) -> nn.Module:
    return EmbeddingBagClassifier(vocab_size, num_classes, embedding_dim, hidden=max(embedding_dim, 64))

"""A language model of your own on a built-in token dataset: the bundle brings the model and its next-token
loss, Trainyard reads the tokens (data.dataset tokens: a flat train.bin/val.bin of ids; or text: .jsonl or
.parquet tokenized with your tokenizer).

    $ python -m trainers.data.tokens make-demo var/data/tokens-demo   # ids 0..63; TRAINYARD_DATA_DIR=var/data
    $ trainyard submit examples/tokens_lm/spec.json --code examples/tokens_lm --follow

Every batch is (inputs, targets): two int64 tensors of batch x data.block_size ids, the targets the same
windows one token later.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def build(vocab_size: int, width: int = 32) -> nn.Module:
    """A bigram model: each token's embedding read out as logits over the next one."""
    return nn.Sequential(nn.Embedding(vocab_size, width), nn.Linear(width, vocab_size))


def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Next-token cross entropy, the mean over every position of every window."""
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

"""The forecast's model, built on the meta device and given fake storage, keeps the parameters its modules
share (GPT-2's token embedding is its output head): counted once, as the trained model holds them."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from trainers.forecast.trace import tied_again
from trainers.models import build_model

KWARGS = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8}


def test_a_tied_embedding_stays_one_parameter_with_fake_storage() -> None:
    trained = build_model("gpt", KWARGS, 0, 32, 0, vocab_size=32)
    with torch.device("meta"):
        model = build_model("gpt", KWARGS, 0, 32, 0, vocab_size=32)
    with FakeTensorMode(allow_non_fake_inputs=True), tied_again(model):
        model.to_empty(device=torch.device("cpu"))
    assert model.lm_head.weight is model.wte.weight
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in trained.parameters())

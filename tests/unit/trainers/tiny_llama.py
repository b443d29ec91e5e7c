"""A tiny Llama (2 layers, 64 wide) saved as a user brings a model directory: config.json, safetensors
weights, and the tokenizer its vocabulary comes from; with a corpus of the tokenizer's words to train on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from tests.unit.trainers.token_corpus import DOCUMENTS, save_tokenizer, write_jsonl

BLOCK = 8


def save_tiny_llama(directory: Path, seed: int = 0) -> LlamaConfig:
    vocab = save_tokenizer(directory).get_vocab_size()
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    return config


def write_corpus(data_dir: Path) -> None:
    """Enough documents for a few steps of 8 windows of BLOCK tokens, with a held-out tail."""
    write_jsonl(data_dir / "corpus" / "docs.jsonl", DOCUMENTS * 6)


def hf_spec(**model: Any) -> dict[str, Any]:
    """A job on the tiny Llama in data_dir/llama, reading data_dir/corpus with the model's tokenizer."""
    return {
        "name": "tiny-llama",
        "model": {"arch": "hf_causal_lm", "path": "llama", **model},
        "data": {"dataset": "text", "root": "corpus", "tokenizer": "llama", "block_size": BLOCK},
        "train": {"max_steps": 8, "batch_size": 8, "lr": 0.01, "optimizer": "adamw", "seed": 0},
        "checkpoint": {"every_n_steps": 4, "every_n_epochs": 0},
        "metrics": {"every_n_steps": 2},
        "parallel": {"strategy": "single"},
    }


def logits(model_dir: Path, ids: torch.Tensor) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    with torch.no_grad():
        out: torch.Tensor = model(input_ids=ids).logits
    return out

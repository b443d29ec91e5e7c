"""model.arch hf_causal_lm: a Hugging Face causal LM read from model.path (jobspec/hf_files.py), or made
from its config.json with random weights (model.config_only), with LoRA adapters under model.lora
(trainers/lora.py). transformers is imported here only, inside the ranks, with nothing downloaded: the
worker sets HF_HUB_OFFLINE and every read passes local_files_only.

The model's own decoder-layer classes (its `_no_split_modules`) are its blocks: fsdp shards and activation
checkpointing recomputes one layer at a time (own_blocks), unless parallel.wrap names others.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn

from jobspec.catalog.datasets import DatasetName
from jobspec.datadir import data_dir_from_env
from jobspec.hf_files import EXPORT_FILE, config_vocab, model_dir
from jobspec.problems import refuse
from jobspec.spec import ParallelSpec
from jobspec.spec_inputs import DataSpec, ModelSpec
from jobspec.token_files import TOKENIZER_FILE, tokenizer_dir
from trainers.checkpoint import write_file_atomically
from trainers.lm import flops_per_token
from trainers.lora import add_adapters, merged

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")


class CausalLM(nn.Module):
    """Token ids (batch, seq) -> next-token logits (batch, seq, vocab), as the LM objective reads them.
    `model` is the Hugging Face model, or peft's model around it under LoRA."""

    def __init__(self, model: nn.Module, block_size: int) -> None:
        super().__init__()
        self.model = model
        config: Any = model.config  # a transformers PretrainedConfig
        # Every parameter, adapters too, before a strategy shards them; a LoRA job's backward skips the
        # frozen weights' gradients, which MFU (model FLOPs) counts all the same.
        params = sum(p.numel() for p in model.parameters())
        self._flops = flops_per_token(params, config.num_hidden_layers, config.hidden_size, block_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(input_ids=ids, use_cache=False).logits
        return logits

    def flops_per_token(self) -> float:
        return self._flops

    @staticmethod
    def inner_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A state of this wrapper as the wrapped model names it."""
        return {key.removeprefix("model."): value for key, value in state.items()}

    def blocks(self) -> list[str]:
        """The decoder-layer classes the model declares it must not be split inside."""
        return list(getattr(self.model, "_no_split_modules", None) or [])


def _check_vocab(data: DataSpec, data_dir: Path, vocab: int) -> None:
    """The data's ids, below data.vocab_size (tokens) or the tokenizer's vocabulary (text), must be rows of
    the model's embedding."""
    if data.dataset is not DatasetName.TEXT:
        if data.vocab_size > vocab:
            raise refuse(
                "data.vocab_size",
                f"data.vocab_size={data.vocab_size} is more than the {vocab} rows of the model's embedding",
                f"set it to at most {vocab}, the vocab_size of model.path's config.json",
            )
        return
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_dir(data, data_dir) / TOKENIZER_FILE))
    if (size := tokenizer.get_vocab_size(with_added_tokens=True)) > vocab:
        raise refuse(
            "data.tokenizer",
            f"data.tokenizer has {size} tokens, more than the {vocab} rows of the model's embedding",
            "tokenize with the model's own tokenizer: set data.tokenizer to model.path",
        )


def _check_fit(config: Any, data: DataSpec, data_dir: Path, vocab: int) -> None:
    _check_vocab(data, data_dir, vocab)
    context = getattr(config, "max_position_embeddings", None)
    if data.block_size is not None and context is not None and data.block_size > context:
        raise refuse(
            "data.block_size",
            f"data.block_size={data.block_size} is above the model's context of {context} tokens",
            f"use at most {context}",
        )


def load_hf(model: ModelSpec, directory: Path, layers: int | None = None) -> nn.Module:
    """The Hugging Face model of model.path: its weights in fp32 (autocast casts per op), or random ones. With
    `layers`, random weights and that many decoder layers (a forecast traces a few: trainers/forecast/)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if model.config_only or layers is not None:
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        if layers is not None:
            config.num_hidden_layers = layers
        return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    return AutoModelForCausalLM.from_pretrained(
        directory, local_files_only=True, torch_dtype=torch.float32, attn_implementation="sdpa"
    )


def build_hf(model: ModelSpec, data: DataSpec, layers: int | None = None) -> CausalLM:
    assert data.block_size is not None, "the planner requires data.block_size for token datasets"
    data_dir = data_dir_from_env()
    directory = model_dir(model, data_dir)
    hf = load_hf(model, directory, layers)
    _check_fit(hf.config, data, data_dir, config_vocab(directory))
    if model.lora is not None:
        hf = add_adapters(hf, model.lora)
    return CausalLM(hf, data.block_size)


def hf_layers(model: ModelSpec) -> int:
    """The decoder layers model.path's config.json gives the model."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir(model, data_dir_from_env()), local_files_only=True)
    return int(config.num_hidden_layers)


def save_merged(model: CausalLM, state: dict[str, torch.Tensor], spec: ModelSpec, out: Path) -> None:
    """A fresh copy of the model on the CPU takes the trained state (whole, as full_state gathers it from
    any strategy), its adapters merged in, saved as safetensors with model.path's tokenizer files: what
    AutoModelForCausalLM.from_pretrained(out) loads."""
    from transformers import AutoModelForCausalLM

    with torch.device("cpu"):
        fresh = AutoModelForCausalLM.from_config(model.model.config)
        copy = fresh if spec.lora is None else add_adapters(fresh, spec.lora)
    copy.load_state_dict(CausalLM.inner_state(state))
    plain: Any = merged(copy)  # a transformers PreTrainedModel
    plain.save_pretrained(out, safe_serialization=True)
    directory = model_dir(spec, data_dir_from_env())
    for name in TOKENIZER_FILES:
        if (directory / name).is_file():
            shutil.copyfile(directory / name, out / name)


def _readable(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """safetensors writes its file for the owner alone; whoever unpacks the export reads it."""
    member.mode = 0o644
    return member


def write_export(model: CausalLM, spec: ModelSpec, run_dir: Path, state: dict[str, torch.Tensor]) -> None:
    """Rank 0, at the end of a job that finished: the merged weights as one tar in the run directory,
    written atomically with its sha256 beside it, as checkpoints are (GET /v1/jobs/{id}/export)."""
    with tempfile.TemporaryDirectory(dir=run_dir) as staging:
        folder = Path(staging)
        save_merged(model, state, spec, folder)

        def pack(f: BinaryIO) -> None:
            with tarfile.open(fileobj=f, mode="w") as tar:
                for path in sorted(folder.iterdir()):
                    tar.add(path, arcname=path.name, filter=_readable)

        write_file_atomically(run_dir / EXPORT_FILE, pack)


def own_blocks(parallel: ParallelSpec, model: nn.Module) -> ParallelSpec:
    """The parallel section with a Hugging Face model's decoder layers as its blocks, unless parallel.wrap
    names others."""
    if parallel.wrap or not isinstance(model, CausalLM) or not model.blocks():
        return parallel
    return parallel.model_copy(update={"wrap": model.blocks()})


Export = Callable[[dict[str, torch.Tensor], Path], None]  # (the whole trained state, the run directory)


def exporter(spec: ModelSpec, model: nn.Module) -> Export | None:
    """What writes a finished job's merged weights: hf_causal_lm jobs with model.export only."""
    if not isinstance(model, CausalLM) or not spec.export:
        return None
    return lambda state, run_dir: write_export(model, spec, run_dir, state)

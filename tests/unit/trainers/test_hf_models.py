"""model.arch hf_causal_lm built as the ranks build it, from a tiny Llama saved in TRAINYARD_DATA_DIR: the
decoder layers are its blocks, LoRA adapters train alone, and what does not fit the model fails in the job's
first seconds naming the field; the model directory is checked as the API checks it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from jobspec.catalog.archs import ARCHS, Arch
from jobspec.hf_files import model_dir
from jobspec.problems import SpecError
from jobspec.spec import DataSpec, ModelSpec, ParallelSpec
from tests.unit.trainers.tiny_llama import BLOCK, save_tiny_llama, write_corpus
from tests.unit.trainers.token_corpus import save_tokenizer
from trainers.dist_env import DistEnv
from trainers.lora import check_loaded, trainable_state
from trainers.models.hf import CausalLM, build_hf, own_blocks
from trainers.strategies.fsdp import FSDPStrategy
from trainers.strategies.process_group import GroupOptions

SOLO = DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
TEXT = DataSpec(dataset="text", root="corpus", tokenizer="llama", block_size=BLOCK)


@pytest.fixture
def llama(data_dir: Path) -> Path:
    save_tiny_llama(data_dir / "llama")
    write_corpus(data_dir)
    return data_dir / "llama"


def build(data: DataSpec = TEXT, **model: Any) -> CausalLM:
    return build_hf(ModelSpec.model_validate({"arch": "hf_causal_lm", "path": "llama", **model}), data)


def refused_fields(error: pytest.ExceptionInfo[SpecError]) -> list[str]:
    return [problem.field for problem in error.value.problems]


@pytest.mark.parametrize("lora", [None, {"r": 2, "target_modules": ["q_proj"]}])
def test_fsdp_shards_the_models_own_decoder_layers(llama: Path, lora: dict[str, Any] | None) -> None:
    model = build(lora=lora)
    parallel = own_blocks(ParallelSpec(), model)
    assert parallel.wrap == ["LlamaDecoderLayer"]
    units = FSDPStrategy(SOLO, GroupOptions("gloo", timedelta(seconds=10)), parallel.wrap).units(model)
    assert [type(unit).__name__ for unit in units] == ["LlamaDecoderLayer"] * 2
    assert own_blocks(ParallelSpec(wrap=["LlamaMLP"]), model).wrap == ["LlamaMLP"], "parallel.wrap wins"


def test_lora_trains_the_adapters_alone_and_saves_only_them(llama: Path) -> None:
    model = build(lora={"r": 2, "target_modules": ["q_proj", "v_proj"]})
    trained = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trained and all(".lora_" in name for name in trained)
    saved = trainable_state(model, model.state_dict())
    assert sorted(saved) == sorted(trained)
    fresh = build(lora={"r": 2, "target_modules": ["q_proj", "v_proj"]})
    missing, unexpected = fresh.load_state_dict(saved, strict=False)
    check_loaded(fresh, missing, unexpected)  # the frozen model comes from model.path again
    adapter = next(iter(saved))
    with pytest.raises(RuntimeError, match=r"missing \[.*lora_A"):
        check_loaded(fresh, [*missing, adapter], unexpected)
    logits = model(torch.zeros(2, BLOCK, dtype=torch.long))
    assert logits.shape == (2, BLOCK, model.model.config.vocab_size)


def test_config_only_builds_random_weights_of_the_config(llama: Path) -> None:
    (llama / "model.safetensors").unlink()
    with pytest.raises(SpecError, match=r"holds no \*\.safetensors weights") as refused:
        build()
    assert refused_fields(refused) == ["model.path"]
    model = build(config_only=True)
    assert model.blocks() == ["LlamaDecoderLayer"] and model.flops_per_token() > 0
    names = tuple(name for name, _ in model.named_children())
    assert names == ARCHS[Arch.HF_CAUSAL_LM].module_names({}), "one module: never split into stages"


def test_target_modules_that_match_nothing_are_refused_naming_the_linear_layers(llama: Path) -> None:
    with pytest.raises(SpecError, match=r"q_proj, up_proj, v_proj") as refused:
        build(lora={"target_modules": ["qkv"]})
    assert refused_fields(refused) == ["model.lora.target_modules"]


def test_data_the_model_cannot_read_is_refused(llama: Path) -> None:
    with pytest.raises(SpecError, match=r"above the model's context of 64 tokens") as refused:
        build(TEXT.model_copy(update={"block_size": 65}))
    assert refused_fields(refused) == ["data.block_size"]
    tokens = DataSpec(dataset="tokens", root="ids", block_size=BLOCK)  # data.vocab_size 10000 by default
    with pytest.raises(SpecError, match=r"data.vocab_size=10000 is more than the \d+ rows") as refused:
        build(tokens)
    assert refused_fields(refused) == ["data.vocab_size"]
    save_tokenizer(llama.parent / "wide", special=[f"[S{i}]" for i in range(20)])
    with pytest.raises(SpecError, match=r"data.tokenizer has \d+ tokens, more than the \d+ rows") as refused:
        build(TEXT.model_copy(update={"tokenizer": "wide"}))
    assert refused_fields(refused) == ["data.tokenizer"]


def test_the_model_directory_is_checked_as_the_api_checks_it(data_dir: Path, llama: Path) -> None:
    def problems(path: str, config_only: bool = False) -> list[str]:
        spec = ModelSpec(arch="hf_causal_lm", path=path, config_only=config_only)  # type: ignore[arg-type]
        with pytest.raises(SpecError) as refused:
            model_dir(spec, data_dir)
        return [str(problem) for problem in refused.value.problems]

    assert "is not a directory under TRAINYARD_DATA_DIR" in problems("absent")[0]
    (data_dir / "empty").mkdir()
    assert [p.split(";")[0] for p in problems("empty")] == [
        "model.path 'empty' holds no config.json",
        "model.path 'empty' holds no *.safetensors weights",
    ]
    assert len(problems("empty", config_only=True)) == 1, "config_only needs config.json alone"
    (data_dir / "linked").mkdir()
    outside = data_dir.parent / "config.json"
    outside.write_text("{}")
    (data_dir / "linked" / "config.json").symlink_to(outside)
    assert "holds no config.json" in problems("linked", config_only=True)[0], "a link out is no file"


def test_a_frozen_parameter_may_be_missing_from_a_state_and_nothing_else() -> None:
    model = nn.Linear(2, 2)
    model.weight.requires_grad_(False)
    check_loaded(model, ["weight"], [])
    with pytest.raises(RuntimeError, match=r"missing \['bias'\]"):
        check_loaded(model, ["bias"], [])
    with pytest.raises(RuntimeError, match=r"unexpected \['extra'\]"):
        check_loaded(model, [], ["extra"])

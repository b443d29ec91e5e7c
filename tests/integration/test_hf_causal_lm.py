"""model.arch hf_causal_lm under real torchrun on CPU: a tiny Llama from a local directory (config.json,
safetensors, its tokenizer) fine-tuned in full and with LoRA on a text corpus tokenized by that tokenizer.

Each finished job leaves export.tar: merged weights that from_pretrained loads, giving the logits of the job's
last state. A LoRA checkpoint holds the adapters and their optimizer state alone, and a resume from one
continues the curve, under single and under fsdp. fsdp on two gloo ranks (decoder layers sharded one at a
time) follows single's curve.
"""

from __future__ import annotations

import math
import tarfile
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from jobspec.datadir import DATA_DIR_ENV
from jobspec.files import file_sha256
from tests.integration.trainer_helpers import TrainerRun, spec_with, train, train_together
from tests.unit.trainers.tiny_llama import hf_spec, logits, save_tiny_llama, write_corpus

pytestmark = pytest.mark.integration

CLOSE = 1e-4  # fsdp's reduce-scatter sums the same gradients in another order
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
FULL = hf_spec()
ADAPTED = spec_with(hf_spec(lora=LORA), train={"lr": 0.05})
SHARDED = spec_with(ADAPTED, parallel={"strategy": "fsdp", "nproc_per_node": 2})
HALFWAY = Path("checkpoints/step-00000004.pt")
IDS = torch.arange(12).reshape(2, 6) % 20


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("data")
    save_tiny_llama(directory / "llama")
    write_corpus(directory)
    return directory


@pytest.fixture(scope="module")
def runs(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DATA_DIR_ENV, str(data_dir))
        full, lora, fsdp = train_together(
            partial(train, tmp_path_factory.mktemp("full"), FULL, nproc=1),
            partial(train, tmp_path_factory.mktemp("lora"), ADAPTED, nproc=1),
            partial(train, tmp_path_factory.mktemp("fsdp"), SHARDED, nproc=2),
        )
        resumed, resumed_fsdp = train_together(
            partial(train, tmp_path_factory.mktemp("resumed"), ADAPTED, 1, lora.run_dir / HALFWAY),
            partial(train, tmp_path_factory.mktemp("resumed-fsdp"), SHARDED, 2, lora.run_dir / HALFWAY),
        )
    return {"full": full, "lora": lora, "fsdp": fsdp, "resumed": resumed, "resumed_fsdp": resumed_fsdp}


def exported(run: TrainerRun, into: Path) -> Path:
    """export.tar, checked against its sidecar and unpacked."""
    tar = run.run_dir / "export.tar"
    assert (run.run_dir / "export.tar.sha256").read_text().split()[0] == file_sha256(tar)
    with tarfile.open(tar) as archive:
        archive.extractall(into, filter="data")
    return into


def assert_same_curve(a: list[tuple[int, float]], b: list[tuple[int, float]], rtol: float) -> None:
    assert [step for step, _ in a] == [step for step, _ in b]
    for (step, x), (_, y) in zip(a, b, strict=True):
        assert math.isclose(x, y, rel_tol=rtol), f"step {step}: {x} vs {y}"


def unprefixed(state: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {key.removeprefix(prefix): value for key, value in state.items()}


def test_full_fine_tuning_trains_and_exports_its_last_state(
    runs: dict[str, TrainerRun], tmp_path: Path
) -> None:
    run = runs["full"]
    loss = run.metric("loss")
    assert loss[-1][1] < 0.6 * loss[0][1], loss
    assert run.metric("eval_perplexity"), "the LM objective reports perplexity"
    folder = exported(run, tmp_path)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    last = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    last.load_state_dict(unprefixed(run.final_checkpoint()["model"], "model."))
    with torch.no_grad():
        assert torch.equal(logits(folder, IDS), last(input_ids=IDS).logits)


def test_a_lora_checkpoint_holds_the_adapters_and_their_optimizer_state_only(
    runs: dict[str, TrainerRun],
) -> None:
    state = runs["lora"].final_checkpoint()
    assert state["model"] and all(".lora_" in key for key in state["model"]), list(state["model"])
    # Two layers, q_proj and v_proj, A and B each.
    assert len(state["model"]) == len(state["optimizer"]["state"]) == 8
    full = (runs["full"].run_dir / HALFWAY).stat().st_size
    assert (runs["lora"].run_dir / HALFWAY).stat().st_size < full / 10


def test_the_lora_export_is_the_model_with_its_adapters_merged(
    runs: dict[str, TrainerRun], data_dir: Path, tmp_path: Path
) -> None:
    base = AutoModelForCausalLM.from_pretrained(data_dir / "llama", local_files_only=True)
    adapted = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    missing, unexpected = adapted.load_state_dict(
        unprefixed(runs["lora"].final_checkpoint()["model"], "model."), strict=False
    )
    assert not unexpected and all(".lora_" not in key for key in missing)
    folder = exported(runs["lora"], tmp_path)
    merged = logits(folder, IDS)
    with torch.no_grad():
        assert torch.allclose(merged, adapted(input_ids=IDS).logits, atol=1e-5)
    assert not torch.allclose(merged, logits(data_dir / "llama", IDS), atol=1e-3), "the adapters trained"


def test_a_lora_job_resumes_from_its_adapters(runs: dict[str, TrainerRun]) -> None:
    resumed, whole = runs["resumed"], runs["lora"]
    assert resumed.checkpoint_steps() == [8]
    assert_same_curve(resumed.metric("loss"), [m for m in whole.metric("loss") if m[0] > 4], 1e-6)
    ends = resumed.final_checkpoint()["model"], whole.final_checkpoint()["model"]
    assert all(torch.allclose(ends[0][key], ends[1][key], atol=1e-6) for key in ends[1])
    # fsdp scatters the adapters of single's checkpoint over its ranks and keeps the frozen shards it built.
    assert_same_curve(runs["resumed_fsdp"].metric("loss"), resumed.metric("loss"), CLOSE)


def test_fsdp_on_two_ranks_follows_single(runs: dict[str, TrainerRun], tmp_path: Path) -> None:
    assert_same_curve(runs["fsdp"].metric("loss"), runs["lora"].metric("loss"), CLOSE)
    sharded = logits(exported(runs["fsdp"], tmp_path / "fsdp"), IDS)
    assert torch.allclose(sharded, logits(exported(runs["lora"], tmp_path / "single"), IDS), atol=1e-4)

"""The built-in gpt and what language models train with: the next-token loss (padding masked out), the FLOPs
formula and the peak table MFU comes from, AdamW's decay groups, cosine to min_lr, and train.max_tokens; its
head untied (and the plan saying so) where stages spread it over devices."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.config import Settings
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import DataSpec, JobSpec, Schedule, TrainSpec
from tests.unit.conftest import assert_nothing_stored, assert_problem, job_body
from trainers.data.synthetic_tokens import synthetic_splits
from trainers.lm import Throughput, flops_per_token, peak_flops
from trainers.models import build_model
from trainers.models.gpt import GPT
from trainers.objectives import IGNORE_INDEX, NextTokenCrossEntropy, build_objective
from trainers.performance import checkpoint_activations
from trainers.placement import place, unit_names
from trainers.schedule import LrSchedule, build_optimizer, lr_at

TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32}
DATA = {"dataset": "synthetic_tokens", "block_size": 16, "vocab_size": 32}


def gpt_spec(**sections: Any) -> dict[str, Any]:
    return job_body(model={"arch": "gpt", "kwargs": TINY}, data=DATA, **sections)


def tiny_gpt(**kwargs: float) -> GPT:
    model = build_model("gpt", {**TINY, "block_size": 16, **kwargs}, 0, 32, 0, vocab_size=32)
    assert isinstance(model, GPT)
    return model


def test_gpt_predicts_every_next_token_with_tied_embeddings_and_scaled_residual_init() -> None:
    torch.manual_seed(0)
    model = tiny_gpt()
    logits = model(torch.randint(0, 32, (3, 16)))
    assert logits.shape == (3, 16, 32)
    assert model.lm_head.weight is model.wte.weight
    proj = model.blocks[0].attn.c_proj.weight
    assert proj.std().item() == pytest.approx(0.02 / math.sqrt(4), rel=0.2)
    # Causal: a later token changes no earlier position's logits.
    ids = torch.randint(0, 32, (1, 16))
    changed = ids.clone()
    changed[0, 10] = (ids[0, 10] + 1) % 32
    model.eval()
    assert torch.equal(model(ids)[0, :10], model(changed)[0, :10])


def test_an_untied_head_is_a_gpt2_initialised_matrix_of_its_own_and_costs_the_same_flops() -> None:
    torch.manual_seed(0)
    untied, tied = tiny_gpt(tie_embeddings=0), tiny_gpt()
    assert untied.lm_head.weight is not untied.wte.weight
    assert untied.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert untied.flops_per_token() == tied.flops_per_token()  # the head multiplies either way


def test_an_untied_gpt_placed_unit_by_unit_runs_its_own_forward() -> None:
    """model_parallel's mechanism: the meta device stands in for a second device, which the embeddings'
    output must reach through the blocks' pre-hooks (a tied head would drag the embedding there too)."""
    model = tiny_gpt(tie_embeddings=0)
    names = unit_names(model)
    cut = names.index("blocks.1")
    place(model, {name: torch.device("cpu" if i < cut else "meta") for i, name in enumerate(names)})
    assert model.wte.weight.device.type == "cpu" and model.lm_head.weight.device.type == "meta"
    assert model(torch.randint(0, 32, (3, 16))).shape == (3, 16, 32)


def untie_warnings(body: dict[str, Any]) -> list[str]:
    plan = resolve_plan(JobSpec.model_validate(body))
    return [warning for warning in plan.warnings if "tie_embeddings" in warning]


@pytest.mark.parametrize("strategy", ["pipeline", "model_parallel"])
def test_a_gpt_split_over_stages_unties_its_head_and_the_plan_says_so(strategy: str) -> None:
    procs = 2 if strategy == "pipeline" else None
    parallel = {"strategy": strategy, "nproc_per_node": procs, "split_at": ["blocks.1"]}
    (warning,) = untie_warnings(gpt_spec(parallel=parallel))
    assert "unties its output head" in warning and "torchtitan" in warning
    untied = {
        **gpt_spec(parallel=parallel),
        "model": {"arch": "gpt", "kwargs": {**TINY, "tie_embeddings": 0}},
    }
    assert untie_warnings(untied) == [] and untie_warnings(gpt_spec()) == []


def test_activation_checkpointing_recomputes_each_block_to_the_same_gradients() -> None:
    torch.manual_seed(0)
    plain = tiny_gpt(dropout=0.1)
    checkpointed = checkpoint_activations(copy.deepcopy(plain))
    assert all("forward" in vars(block) for block in checkpointed.blocks)  # replaced on each block
    ids = torch.randint(0, 32, (2, 17))
    for model in (plain, checkpointed):
        torch.manual_seed(1)  # the same dropout masks
        F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()).backward()
    for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


def test_synthetic_tokens_are_a_bigram_process_fixed_by_the_seed(tmp_path: Path) -> None:
    data = DataSpec.model_validate({**DATA, "num_samples": 20, "val_fraction": 0.2})
    splits = synthetic_splits(data, seed=3, run_dir=tmp_path)
    assert splits.train.windows(16) == 20 and splits.val is not None and splits.val.windows(16) >= 1
    ids = np.fromfile(splits.train.path, dtype=np.uint16).astype(np.int64)
    assert set(np.diff(ids) % 32) <= {1, 2} and ids.max() < 32
    again = synthetic_splits(data, seed=3, run_dir=tmp_path / "other")
    assert np.array_equal(np.fromfile(again.train.path, dtype=np.uint16), ids)
    other = synthetic_splits(data, seed=4, run_dir=tmp_path)
    assert not np.array_equal(np.fromfile(other.train.path, dtype=np.uint16), ids)


def test_the_lm_loss_is_the_mean_over_tokens_whose_target_is_not_ignored() -> None:
    torch.manual_seed(0)
    logits, target = torch.randn(2, 5, 7), torch.randint(0, 7, (2, 5))
    padded = target.clone()
    padded[1, 3:] = IGNORE_INDEX
    objective = NextTokenCrossEntropy()
    kept = padded != IGNORE_INDEX
    expected = F.cross_entropy(logits[kept], target[kept])
    assert objective.loss(logits, padded).item() == pytest.approx(expected.item(), rel=1e-6)
    tokens, summed = objective.sums(logits, padded).tolist()
    assert tokens == 8
    values = objective.eval_values([tokens, summed])
    assert values["eval_loss"] == pytest.approx(expected.item(), rel=1e-6)
    assert values["eval_perplexity"] == pytest.approx(math.exp(expected.item()), rel=1e-6)


def test_cross_entropy_is_the_next_token_loss_only_for_a_language_model() -> None:
    assert isinstance(build_objective("cross_entropy", None, language_model=True), NextTokenCrossEntropy)
    assert not isinstance(build_objective("cross_entropy", None), NextTokenCrossEntropy)


def test_flops_per_token_is_6n_plus_attention_by_hand() -> None:
    model = tiny_gpt()
    # Per block: qkv 32*96, out 32*32, MLP 2 * 32*128, two LayerNorm scales of 32 (no biases): 12352.
    # Two blocks, the tied 32x32 token embedding, ln_f's 32; position embeddings are left out.
    n_params = 2 * 12352 + 32 * 32 + 32
    hand = 6 * n_params + 12 * 2 * 32 * 16
    assert flops_per_token(n_params, 2, 32, 16) == hand == 166_848
    assert model.flops_per_token() == hand


def test_mfu_comes_from_the_device_name_and_none_for_an_unknown_gpu() -> None:
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA H200") == 989e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops("Some Future GPU") is None
    rate = Throughput(tokens_per_sample=1024, flops_per_token=1e9, peak=2 * 989e12)
    values = rate.values(samples_per_s=100.0)
    assert values["tokens_per_s"] == 102_400
    assert values["mfu"] == pytest.approx(102_400 * 1e9 / (2 * 989e12))
    assert "mfu" not in Throughput(1024, 1e9, None).values(100.0)


def test_adamw_decays_weight_matrices_only_with_the_given_betas() -> None:
    model = tiny_gpt(bias=1)
    train = TrainSpec(optimizer="adamw", weight_decay=0.1, betas=[0.9, 0.95])
    optimizer = build_optimizer(model.parameters(), train, 1e-3, torch.device("cpu"))
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decayed["params"]) and all(p.dim() == 1 for p in plain["params"])
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))
    assert decayed["betas"] == (0.9, 0.95)


def test_cosine_warms_up_then_decays_to_min_lr() -> None:
    train = TrainSpec(schedule=Schedule.COSINE, warmup_steps=10, min_lr=1e-4, max_steps=110)
    schedule = LrSchedule.from_spec(train, 1e-3, total_steps=110, steps_per_epoch=110)
    assert lr_at(0, schedule) == pytest.approx(1e-4)
    assert lr_at(9, schedule) == pytest.approx(1e-3)
    assert lr_at(60, schedule) == pytest.approx((1e-3 + 1e-4) / 2)
    assert lr_at(110, schedule) == pytest.approx(1e-4)


def test_max_tokens_plans_to_whole_steps_the_trainer_runs() -> None:
    spec = JobSpec.model_validate(gpt_spec(train={"max_tokens": 10_000, "batch_size": 16}))
    plan = resolve_plan(spec)
    assert plan.max_steps == math.ceil(10_000 / (16 * 16)) == 40
    config = RunConfig(job_id=1, attempt=1, spec=spec, plan=plan)
    reread = RunConfig.model_validate_json(config.model_dump_json())
    assert reread.spec.train.max_steps == 40


@pytest.mark.parametrize(
    ("sections", "field", "fragment"),
    [
        ({"data": {"dataset": "synthetic", "num_samples": 64}}, "model.arch", "takes token sequences"),
        ({"model": {"arch": "gpt", "kwargs": {**TINY, "n_embd": 33}}}, "model.kwargs.n_embd", "n_head=2"),
        ({"model": {"arch": "gpt", "kwargs": {**TINY, "block_size": 8}}}, "model.kwargs.block_size", "16"),
        (
            {
                "model": {"arch": "gpt", "kwargs": {**TINY, "tie_embeddings": 1}},
                "parallel": {"strategy": "pipeline", "nproc_per_node": 2},
            },
            "model.kwargs.tie_embeddings",
            "set model.kwargs.tie_embeddings=0",
        ),
        ({"train": {"max_steps": 5, "max_tokens": 100}}, "train", "not both"),
        (
            {"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}, "train": {"max_tokens": 100}},
            "train.max_tokens",
            "data.block_size",
        ),
    ],
)
def test_a_gpt_that_cannot_train_is_refused_at_submit(
    client: TestClient,
    session: Session,
    settings: Settings,
    sections: dict[str, Any],
    field: str,
    fragment: str,
) -> None:
    assert_problem(client.post("/v1/jobs", json={**gpt_spec(), **sections}), field, fragment)
    assert_nothing_stored(session, settings)

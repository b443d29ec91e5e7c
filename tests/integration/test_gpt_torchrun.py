"""model.arch gpt (2 layers) on synthetic_tokens under real torchrun on the CPU: single, ddp and fsdp (2 gloo
ranks each), side by side. The three see the same global batch of windows per step (the ranks' shares of one
seeded order), so ddp's and fsdp's curves follow single's within the fp32 tolerance of the built-in models'
strategy tests; the loss falls towards the bigram process's ln(2); a resume from fsdp's step-10 checkpoint
under single continues the curve; the language model's metrics are reported.

Split over two CPU stages (model_parallel in one process, pipeline in two with four micro-batches), the
gpt unties its head by default, so those runs follow single with tie_embeddings=0, to the tolerances of
the built-in models' stage tests (test_strategies_cpu.py), and checkpoint under single's keys.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import torch

from tests.integration.test_strategies_cpu import CLOSE, EXACT, after, assert_same_curve
from tests.integration.trainer_helpers import TrainerRun, spec_with, train, train_together

pytestmark = pytest.mark.integration

RTOL = 1e-5  # fp32 under ddp and fsdp against single: test_trainer_torchrun's and test_user_code_torchrun's
GPT: dict[str, Any] = {
    "name": "gpt-cpu",
    "model": {"arch": "gpt", "kwargs": {"n_layer": 2, "n_head": 2, "n_embd": 32}},
    "data": {"dataset": "synthetic_tokens", "block_size": 16, "vocab_size": 32, "num_samples": 256},
    "train": {
        "max_steps": 20,
        "batch_size": 16,
        "optimizer": "adamw",
        "lr": 0.01,
        "betas": [0.9, 0.95],
        "weight_decay": 0.1,
        "schedule": "cosine",
        "warmup_steps": 4,
        "min_lr": 0.001,
        "clip_grad_norm": 1.0,
        "seed": 0,
    },
    "parallel": {"strategy": "single"},
    "checkpoint": {"every_n_steps": 10, "every_n_epochs": 0},
    "metrics": {"every_n_steps": 5},
}
DDP = spec_with(GPT, parallel={"strategy": "ddp", "nproc_per_node": 2})
FSDP = spec_with(GPT, parallel={"strategy": "fsdp", "nproc_per_node": 2})
UNTIED = spec_with(GPT, model={"kwargs": {"n_layer": 2, "n_head": 2, "n_embd": 32, "tie_embeddings": 0}})
MODEL_PARALLEL = spec_with(GPT, parallel={"strategy": "model_parallel", "split_at": ["blocks.1"]})
PIPELINE = spec_with(GPT, parallel={"strategy": "pipeline", "nproc_per_node": 2, "microbatches": 4})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    single, ddp, fsdp = train_together(
        partial(train, tmp_path_factory.mktemp("single"), GPT, nproc=1),
        partial(train, tmp_path_factory.mktemp("ddp"), DDP, nproc=2),
        partial(train, tmp_path_factory.mktemp("fsdp"), FSDP, nproc=2),
    )
    return {"single": single, "ddp": ddp, "fsdp": fsdp}


def test_the_loss_falls_and_lm_metrics_are_reported(runs: dict[str, TrainerRun]) -> None:
    loss = runs["single"].metric("loss")
    assert loss[-1][1] < 0.5 * loss[0][1], loss
    (step, perplexity), *_ = runs["single"].metric("eval_perplexity")
    assert step == 16 and perplexity < 32  # below a uniform guess over the vocabulary
    assert all(value > 0 for _, value in runs["single"].metric("tokens_per_s"))
    assert runs["single"].metric("mfu") == []  # the CPU has no peak in the table


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_ddp_and_fsdp_follow_single(runs: dict[str, TrainerRun], strategy: str) -> None:
    assert_same_curve(runs[strategy].metric("loss"), runs["single"].metric("loss"), RTOL)


def test_a_resume_of_fsdp_under_single_continues_the_curve(
    runs: dict[str, TrainerRun], tmp_path_factory: pytest.TempPathFactory
) -> None:
    checkpoint = runs["fsdp"].run_dir / "checkpoints" / "step-00000010.pt"
    resumed = train(tmp_path_factory.mktemp("resumed"), GPT, nproc=1, resume_path=checkpoint)
    assert_same_curve(resumed.metric("loss"), after(runs["single"].metric("loss"), 10), RTOL)


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    untied, model_parallel, pipeline = train_together(
        partial(train, tmp_path_factory.mktemp("untied"), UNTIED, nproc=1),
        partial(train, tmp_path_factory.mktemp("model_parallel"), MODEL_PARALLEL, nproc=1),
        partial(train, tmp_path_factory.mktemp("pipeline"), PIPELINE, nproc=2),
    )
    return {"untied": untied, "model_parallel": model_parallel, "pipeline": pipeline}


@pytest.mark.parametrize(("strategy", "rtol"), [("model_parallel", EXACT), ("pipeline", CLOSE)])
def test_a_gpt_over_two_stages_follows_single_untied(
    staged: dict[str, TrainerRun], strategy: str, rtol: float
) -> None:
    run, single = staged[strategy], staged["untied"]
    loss = run.metric("loss")
    assert loss[-1][1] < 0.5 * loss[0][1], loss
    for name in ("loss", "eval_perplexity"):
        assert_same_curve(run.metric(name), single.metric(name), rtol)
    assert all(value > 0 for _, value in run.metric("tokens_per_s"))
    whole, split = single.final_checkpoint()["model"], run.final_checkpoint()["model"]
    assert list(split) == list(whole)
    assert not torch.equal(split["lm_head.weight"], split["wte.weight"])


def test_a_resume_of_the_pipeline_under_single_continues_the_curve(
    staged: dict[str, TrainerRun], tmp_path_factory: pytest.TempPathFactory
) -> None:
    checkpoint = staged["pipeline"].run_dir / "checkpoints" / "step-00000010.pt"
    resumed = train(tmp_path_factory.mktemp("resumed"), UNTIED, nproc=1, resume_path=checkpoint)
    assert_same_curve(resumed.metric("loss"), after(staged["untied"].metric("loss"), 10), CLOSE)

"""model_parallel and pipeline under real torchrun on CPU, against a single-process reference.

One spec (an MLP on digits, 30 steps of 64, a checkpoint at step 15) runs under single, model_parallel (two
CPU stages in one process) and pipeline (two gloo processes, four micro-batches). model_parallel does the
same arithmetic as single, so its curve matches to rtol 1e-6. pipeline averages four micro-batch means of
16 and sums their gradients, the same maths in another order of float sums: over 30 steps its curve stays
within rtol 1e-4 of single's (measured 4e-7). Resumes cross strategies (single -> model_parallel,
model_parallel -> pipeline, pipeline -> single) and must continue the reference curve.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.integration.trainer_helpers import TrainerRun, spec_with, train, train_together

pytestmark = pytest.mark.integration

EXACT, CLOSE = 1e-6, 1e-4
COMPILED = 1e-3  # Inductor's fused kernels round differently from eager ones
CKPT = Path("checkpoints/step-00000015.pt")

SINGLE: dict[str, Any] = {
    "name": "digits-mlp",
    "model": {"arch": "mlp", "kwargs": {"hidden": 64, "depth": 2}},
    "data": {"dataset": "digits", "val_fraction": 0.1},
    "train": {"max_steps": 30, "batch_size": 64, "lr": 0.05, "momentum": 0.9, "seed": 0},
    "parallel": {"strategy": "single"},
    "checkpoint": {"every_n_steps": 15, "every_n_epochs": 0},
    "metrics": {"every_n_steps": 5},
}
MODEL_PARALLEL = spec_with(SINGLE, parallel={"strategy": "model_parallel"})
PIPELINE = spec_with(SINGLE, parallel={"strategy": "pipeline", "nproc_per_node": 2, "microbatches": 4})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    single, model_parallel, pipeline = train_together(
        partial(train, tmp_path_factory.mktemp("single"), SINGLE, nproc=1),
        partial(train, tmp_path_factory.mktemp("mp"), MODEL_PARALLEL, nproc=1),
        partial(train, tmp_path_factory.mktemp("pipeline"), PIPELINE, nproc=2),
    )
    return {"single": single, "model_parallel": model_parallel, "pipeline": pipeline}


def assert_same_curve(a: list[tuple[int, float]], b: list[tuple[int, float]], rtol: float) -> None:
    assert [step for step, _ in a] == [step for step, _ in b]
    for (step, x), (_, y) in zip(a, b, strict=True):
        assert math.isclose(x, y, rel_tol=rtol), f"step {step}: {x} vs {y}"


def after(curve: list[tuple[int, float]], step: int) -> list[tuple[int, float]]:
    return [(s, v) for s, v in curve if s > step]


@pytest.mark.parametrize("strategy", ["single", "model_parallel", "pipeline"])
def test_loss_falls_and_evaluation_runs(runs: dict[str, TrainerRun], strategy: str) -> None:
    loss = runs[strategy].metric("loss")
    assert [step for step, _ in loss] == list(range(5, 31, 5))
    assert loss[-1][1] < 0.4 * loss[0][1], loss
    accuracy = runs[strategy].metric("eval_accuracy")
    assert [step for step, _ in accuracy] == [25, 30] and accuracy[-1][1] > 0.8, accuracy
    assert runs[strategy].checkpoint_steps() == [15, 30]


def test_model_parallel_on_cpu_stages_follows_single_exactly(runs: dict[str, TrainerRun]) -> None:
    for name in ("loss", "eval_loss", "eval_accuracy"):
        assert_same_curve(runs["model_parallel"].metric(name), runs["single"].metric(name), EXACT)


def test_pipeline_follows_single(runs: dict[str, TrainerRun]) -> None:
    for name in ("loss", "eval_loss"):
        assert_same_curve(runs["pipeline"].metric(name), runs["single"].metric(name), CLOSE)
    assert runs["pipeline"].metric("eval_accuracy") == runs["single"].metric("eval_accuracy")


def test_a_compiled_pipeline_follows_the_eager_one(
    runs: dict[str, TrainerRun], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schedule calls each stage itself, so performance.compile must compile the stages: Inductor then
    writes their generated code to its cache."""
    cache = tmp_path / "inductor-cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    compiled = train(tmp_path / "run", spec_with(PIPELINE, performance={"compile": True}), nproc=2)
    assert_same_curve(compiled.metric("loss"), runs["pipeline"].metric("loss"), COMPILED)
    assert list(cache.rglob("*.py")), "Inductor generated no code"


def test_pipeline_checkpoint_holds_the_whole_model_under_bare_keys(runs: dict[str, TrainerRun]) -> None:
    whole = torch.load(runs["single"].run_dir / CKPT, weights_only=True)
    gathered = torch.load(runs["pipeline"].run_dir / CKPT, weights_only=True)
    assert list(gathered["model"]) == list(whole["model"])
    for key, value in whole["model"].items():
        torch.testing.assert_close(gathered["model"][key], value, rtol=1e-3, atol=1e-4)
    assert gathered["optimizer"]["param_groups"] == whole["optimizer"]["param_groups"]
    assert sorted(gathered["optimizer"]["state"]) == sorted(whole["optimizer"]["state"])


# name: (the run resumed from, the spec it resumes under, its processes, the tolerance against single)
RESUMES: dict[str, tuple[str, dict[str, Any], int, float]] = {
    "single->model_parallel": ("single", MODEL_PARALLEL, 1, EXACT),
    "model_parallel->pipeline": ("model_parallel", PIPELINE, 2, CLOSE),
    "pipeline->single": ("pipeline", SINGLE, 1, CLOSE),
}


@pytest.fixture(scope="module")
def resumed(runs: dict[str, TrainerRun], tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    """Each resume of RESUMES from its source's step-15 checkpoint, side by side."""
    done = train_together(
        *(
            partial(
                train,
                tmp_path_factory.mktemp("resumed"),
                spec,
                nproc=nproc,
                resume_path=runs[source].run_dir / CKPT,
            )
            for source, spec, nproc, _ in RESUMES.values()
        )
    )
    return dict(zip(RESUMES, done, strict=True))


@pytest.mark.parametrize("name", list(RESUMES))
def test_resume_across_strategies_continues_the_curve(
    runs: dict[str, TrainerRun], resumed: dict[str, TrainerRun], name: str
) -> None:
    rtol = RESUMES[name][3]
    assert resumed[name].checkpoint_steps() == [30]
    assert_same_curve(resumed[name].metric("loss"), after(runs["single"].metric("loss"), 15), rtol)


def test_pipeline_trains_a_channels_last_convnet(tmp_path: Path) -> None:
    """Stage outputs and their gradients cross processes by point-to-point send, which needs dense tensors;
    channels_last activations and gradients are not."""
    spec = spec_with(
        PIPELINE,
        model={"arch": "small_cnn", "kwargs": {}},
        train={"max_steps": 4, "epochs": None},
        performance={"channels_last": True},
        checkpoint={"every_n_epochs": 0, "save_final": False},
        metrics={"every_n_steps": 2},
    )
    run = train(tmp_path, spec, nproc=2)
    assert [step for step, _ in run.metric("loss")] == [2, 4]

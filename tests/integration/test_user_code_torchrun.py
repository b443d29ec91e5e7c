"""User code under real torchrun, as the worker launches it (2 gloo ranks on CPU, the bundle unpacked in a
directory the run config names).

The example bundle (examples/byom: a CNN, a map-style dataset read through DataLoader workers, a loss that
reports accuracy) trains 30 steps of 64 under single, ddp, fsdp, model_parallel and pipeline, split where
`parallel.split_at` names its `head`. Every strategy sees the same samples per step: ddp and fsdp average
the gradients of two equal shards, model_parallel runs single's arithmetic on CPU stages, and pipeline sums
four micro-batches; their curves follow single's within rtol 1e-5 (measured: 1e-8 for ddp and fsdp, 2e-6
for pipeline), where a wrong shard or a skipped batch moves them by percents. A resume from single's
step-10 checkpoint continues its curve exactly. A tiny transformer bundle (dict batches streamed from an
IterableDataset, a loss returning its own metric) trains under fsdp with activation checkpointing, and
resumes its stream. A factory that raises fails the job with the marker the worker reads.
"""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from jobspec.events import SPEC_FILE
from tests.integration.trainer_helpers import (
    TrainerRun,
    launch,
    spec_with,
    train,
    train_together,
    write_config,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BYOM = ROOT / "examples" / "byom"
TRANSFORMER = Path(__file__).parent / "bundles" / "tiny_transformer"
CODE = "sha256:" + "0" * 64
RTOL = 1e-5
CKPT = Path("checkpoints/step-00000010.pt")

DDP: dict[str, Any] = {**json.loads((BYOM / SPEC_FILE).read_text()), "code": CODE}
SINGLE = spec_with(DDP, parallel={"strategy": "single", "nproc_per_node": 1})
SPECS: dict[str, tuple[dict[str, Any], int]] = {
    "single": (SINGLE, 1),
    "ddp": (DDP, 2),
    "model_parallel": (spec_with(SINGLE, parallel={"strategy": "model_parallel", "split_at": ["head"]}), 1),
    "fsdp": (spec_with(DDP, parallel={"strategy": "fsdp"}), 2),
    # A pipeline's last stage computes the loss from its output alone: the built-in one, which is the
    # bundle's loss without its accuracy.
    "pipeline": (
        spec_with(
            DDP, parallel={"strategy": "pipeline", "split_at": ["head"]}, train={"loss": "cross_entropy"}
        ),
        2,
    ),
}
TRANSFORMER_SPEC: dict[str, Any] = {
    "name": "tiny-transformer",
    "code": CODE,
    "model": {"factory": "models:build", "kwargs": {"vocab": 16, "width": 32, "depth": 2}},
    "data": {"factory": "data:build", "kwargs": {"count": 512}, "loader_workers": 1},
    "train": {"loss": "models:loss", "max_steps": 30, "batch_size": 32, "optimizer": "adamw", "lr": 0.003},
    "parallel": {"strategy": "fsdp", "nproc_per_node": 2},
    "performance": {"activation_checkpointing": True},
    "checkpoint": {"every_n_steps": 15, "every_n_epochs": 0},
    "metrics": {"every_n_steps": 5},
}


def byom_run(tmp: pytest.TempPathFactory, name: str, resume_path: Path | None = None) -> TrainerRun:
    spec, nproc = SPECS[name]
    return train(tmp.mktemp(name), spec, nproc=nproc, resume_path=resume_path, code_dir=BYOM)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    first = ["single", "ddp", "model_parallel"]
    done = train_together(*(partial(byom_run, tmp_path_factory, name) for name in first))
    single = done[0]
    done += train_together(
        partial(byom_run, tmp_path_factory, "fsdp"),
        partial(byom_run, tmp_path_factory, "pipeline"),
        partial(byom_run, tmp_path_factory, "single", single.run_dir / CKPT),
    )
    return dict(zip([*first, "fsdp", "pipeline", "resumed"], done, strict=True))


def assert_same_curve(a: list[tuple[int, float]], b: list[tuple[int, float]], rtol: float) -> None:
    assert [step for step, _ in a] == [step for step, _ in b] and a
    for (step, x), (_, y) in zip(a, b, strict=True):
        assert math.isclose(x, y, rel_tol=rtol), f"step {step}: {x} vs {y}"


@pytest.mark.parametrize("strategy", list(SPECS))
def test_the_bundle_trains_to_a_falling_loss(runs: dict[str, TrainerRun], strategy: str) -> None:
    loss = runs[strategy].metric("loss")
    assert [step for step, _ in loss] == list(range(5, 31, 5))
    assert loss[-1][1] < 0.7 * loss[0][1], loss
    assert [step for step, _ in runs[strategy].metric("eval_accuracy")] == [30]
    assert runs[strategy].checkpoint_steps() == [10, 20, 30]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "model_parallel"])
def test_the_losss_own_metric_and_every_curve_follow_single(
    runs: dict[str, TrainerRun], strategy: str
) -> None:
    for name in ("loss", "accuracy", "eval_loss", "eval_accuracy"):
        assert_same_curve(runs[strategy].metric(name), runs["single"].metric(name), RTOL)


def test_a_pipeline_split_where_split_at_says_follows_single(runs: dict[str, TrainerRun]) -> None:
    for name in ("loss", "eval_loss", "eval_accuracy"):
        assert_same_curve(runs["pipeline"].metric(name), runs["single"].metric(name), RTOL)
    assert runs["pipeline"].metric("accuracy") == [], "only the bundle's loss reports accuracy"


def test_checkpoints_hold_the_bundles_model_under_its_own_names(runs: dict[str, TrainerRun]) -> None:
    keys = list(runs["single"].final_checkpoint()["model"])
    assert keys[0].startswith("features.") and keys[-1] == "head.bias"
    for strategy in ("ddp", "fsdp", "pipeline"):
        assert list(runs[strategy].final_checkpoint()["model"]) == keys, strategy


def test_a_resume_continues_the_curve_on_the_samples_it_would_have_seen(runs: dict[str, TrainerRun]) -> None:
    resumed = runs["resumed"]
    assert resumed.checkpoint_steps() == [20, 30]
    for name in ("loss", "accuracy", "eval_loss"):
        after = [(step, value) for step, value in runs["single"].metric(name) if step > 10]
        assert_same_curve(resumed.metric(name), after, 1e-6)
    assert resumed.parameter_sum() == pytest.approx(runs["single"].parameter_sum(), rel=1e-9)


def test_a_transformer_with_dict_batches_trains_sharded_and_resumes_its_stream(tmp_path: Path) -> None:
    run = train(tmp_path / "run", TRANSFORMER_SPEC, nproc=2, code_dir=TRANSFORMER)
    loss = run.metric("loss")
    assert loss[-1][1] < 0.7 * loss[0][1], loss
    assert [step for step, _ in run.metric("token_accuracy")] == list(range(5, 31, 5))
    assert run.metric("eval_token_accuracy")[0][1] > 0.4, run.metric("eval_token_accuracy")
    resumed = train(
        tmp_path / "resumed",
        TRANSFORMER_SPEC,
        nproc=2,
        resume_path=run.run_dir / "checkpoints/step-00000015.pt",
        code_dir=TRANSFORMER,
    )
    assert_same_curve(resumed.metric("loss"), [(s, v) for s, v in loss if s > 15], 1e-6)


def test_a_factorys_model_trains_on_a_built_in_resident_dataset(tmp_path: Path) -> None:
    """The fast path's batches, shaped for a convolutional model: channels_last applies to it."""
    spec = {
        "code": CODE,
        "model": {"factory": "models:build", "kwargs": {"channels": 16}},
        "data": {"dataset": "synthetic", "num_samples": 2048},
        "train": {"loss": "models:loss", "max_steps": 40, "batch_size": 32, "lr": 0.1},
        "performance": {"channels_last": True},
        "checkpoint": {"every_n_epochs": 0},
        "metrics": {"every_n_steps": 5},
    }
    run = train(tmp_path, spec, nproc=1, code_dir=BYOM)
    loss = run.metric("loss")
    assert loss[-1][1] < 0.7 * loss[0][1], loss
    assert [step for step, _ in run.metric("eval_accuracy")] == [40]


def test_a_raising_factory_fails_the_job_with_the_marker_and_the_users_line(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "models.py").write_text("def build(channels=16):\n    raise ValueError('no GPU here')\n")
    run_dir = tmp_path / "run"
    spec = {"code": CODE, "model": {"factory": "models:build"}, "data": {"dataset": "digits"}}
    write_config(run_dir, spec, code_dir=bundle)
    assert launch(run_dir, nproc=1).returncode != 0
    message = json.loads((run_dir / "error.json").read_text())["message"]["message"]
    assert message.splitlines() == [
        "UserCodeError: user_code_error: model.factory 'models:build' raised ValueError: no GPU here",
        "  models.py, line 2, in build",
        "    raise ValueError('no GPU here')",
    ]

"""train.on_nonfinite under real torchrun with 2 gloo ranks on CPU, where only rank 1's loss goes NaN (at
its third step, by a loss of the code bundle): under skip_step both ranks skip that update together, so the
weights stay finite; under fail the job's error file names the step, and the worker reads it as
nonfinite_loss."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from jobspec.events import WarningEvent
from tests.integration.trainer_helpers import (
    TrainerRun,
    launch,
    spec_with,
    train,
    train_together,
    write_config,
)
from worker.failure import FailureKind, classify_failure, error_file_message

pytestmark = pytest.mark.integration

LOSSES = '''
import os

import torch.nn.functional as F

steps = 0


def loss(model, batch):
    """Cross-entropy, but NaN on rank 1 alone at its third step."""
    global steps
    steps += 1
    x, y = batch
    value = F.cross_entropy(model(x), y)
    return value * float("nan") if steps == 3 and os.environ["RANK"] == "1" else value
'''

SPEC: dict[str, Any] = {
    "code": "sha256:" + "0" * 64,
    "model": {"arch": "mlp", "kwargs": {"hidden": 32, "depth": 1}},
    "data": {"dataset": "digits"},
    "train": {"max_steps": 10, "batch_size": 64, "loss": "losses:loss", "eval_every_epochs": 0},
    "parallel": {"strategy": "ddp", "nproc_per_node": 2},
    "checkpoint": {"every_n_epochs": 0, "save_final": True},
    "metrics": {"every_n_steps": 5},
}


def failed_run(run_dir: Path, spec: dict[str, Any], code_dir: Path) -> Path:
    write_config(run_dir, spec, code_dir=code_dir)
    assert launch(run_dir, nproc=2).returncode != 0
    return run_dir


def test_ranks_agree_to_skip_a_step_only_one_of_them_saw_go_nan(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "losses.py").write_text(LOSSES)
    skipping = spec_with(SPEC, train={"on_nonfinite": "skip_step"})
    failing = spec_with(SPEC, train={"on_nonfinite": "fail"})
    skipped, failed = train_together(
        lambda: train(tmp_path / "skip", skipping, nproc=2, code_dir=bundle),
        lambda: TrainerRun(failed_run(tmp_path / "fail", failing, bundle), 2),
    )

    assert skipped.metric("nonfinite_steps") == [(5, 1.0), (10, 0.0)]
    assert all(math.isfinite(loss) for _, loss in skipped.metric("loss"))
    warnings = [e for e in skipped.events() if isinstance(e, WarningEvent)]
    assert [(w.step, w.reason) for w in warnings] == [(3, "nonfinite_loss")]
    # Had rank 0 stepped alone, the NaN gradients DDP averaged in would have reached every weight.
    assert all(torch.isfinite(value).all() for value in skipped.final_checkpoint()["model"].values())

    message = error_file_message(failed.run_dir) or ""
    assert message.startswith("NonFiniteLoss: the training loss was not finite (NaN or inf) at step 3;"), (
        message
    )
    assert classify_failure(failed.run_dir, 1) is FailureKind.NONFINITE_LOSS

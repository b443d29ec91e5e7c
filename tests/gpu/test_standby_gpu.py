"""Ranks forked from the warm standby train on their GPUs: the standby imports torch without initialising
CUDA (else it would start the ranks cold), and each forked rank initialises CUDA for its own GPU.

Skipped without CUDA (the 2-GPU case with fewer); run on the device machine:
    .venv/bin/python -m pytest -q tests/gpu/test_standby_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from core.project import PROJECT_ROOT
from jobspec.events import LAUNCHER_LOG, LOG_DIR, DoneEvent
from tests.integration.trainer_helpers import TrainerRun, spec_with
from tests.unit.worker.test_standby import TIMEOUT_S, trainer_launch, waiting_standby
from worker.executors.local.warm.launcher import WarmLauncher

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

STEPS = 20
BASE: dict[str, Any] = {
    "name": "small-cnn",
    "model": {"arch": "small_cnn"},
    "data": {"dataset": "synthetic", "num_samples": 4096, "image_size": 32, "num_classes": 10},
    "train": {"max_steps": STEPS, "batch_size": 128, "lr": 0.05, "seed": 0},
    "metrics": {"every_n_steps": 10},
}
GPUS = {"single": [0], "ddp": [0, 1]}  # strategy: the GPUs its job takes


@pytest.mark.parametrize("strategy", list(GPUS))
def test_ranks_forked_from_the_standby_train_on_their_gpus(tmp_path: Path, strategy: str) -> None:
    gpus = GPUS[strategy]
    if torch.cuda.device_count() < len(gpus):
        pytest.skip(f"needs {len(gpus)} GPUs")
    launcher = WarmLauncher(sys.executable, PROJECT_ROOT)
    waiting_standby(launcher)  # started while the factory still imports, the job would start cold
    spec = spec_with(BASE, parallel={"strategy": strategy, "gpus": gpus})
    command = trainer_launch(tmp_path, spec, gpu_ids=gpus)
    run = TrainerRun(tmp_path / "1", len(gpus))
    log = run.run_dir / LOG_DIR / LAUNCHER_LOG
    log.parent.mkdir()
    try:
        code = launcher.start(command, log).wait(TIMEOUT_S)
    finally:
        launcher.close()
    ranks = "\n".join(run.log(rank) for rank in range(run.nproc))
    assert code == 0, f"{log.read_text()}\n{ranks}"
    assert "ranks forked from it" in log.read_text()
    assert isinstance(run.events()[-1], DoneEvent)
    loss = run.metric("loss")
    assert len(loss) == STEPS // 10 and loss[-1][1] < loss[0][1], loss

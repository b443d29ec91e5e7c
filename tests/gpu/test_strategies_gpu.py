"""dp, model_parallel, pipeline and hybrid CPU/GPU placement on real GPUs, in bf16 and fp16.

Skipped without CUDA (and the 2-GPU ones with fewer); run on the device machine:
    .venv/bin/python -m pytest -q tests/gpu/test_strategies_gpu.py
Each torchrun job trains small_cnn on synthetic 32 px images for 40 steps; the loss must at least halve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from jobspec.events import CHECKPOINT_DIR
from jobspec.spec import DevicePlacement, Precision, TrainSpec
from tests.integration.trainer_helpers import TrainerRun, spec_with, train
from trainers.checkpoint import checkpoint_name
from trainers.dist_env import DistEnv
from trainers.objectives import CrossEntropy
from trainers.precision import MixedPrecision
from trainers.schedule import build_optimizer
from trainers.strategies.dp import DataParallelStrategy
from trainers.strategies.single import SingleDeviceStrategy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")

STEPS = 40
GPU0 = DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cuda", 0))

BASE: dict[str, Any] = {
    "name": "small-cnn",
    "model": {"arch": "small_cnn"},
    "data": {"dataset": "synthetic", "num_samples": 8192, "image_size": 32, "num_classes": 10},
    "train": {"max_steps": STEPS, "batch_size": 128, "lr": 0.05, "seed": 0},
    "checkpoint": {"every_n_epochs": 0, "every_n_steps": 20, "save_final": True},
    "metrics": {"every_n_steps": 10},
}
LAYOUTS: dict[str, tuple[dict[str, Any], int]] = {
    "dp": ({"strategy": "dp", "gpus": [0, 1]}, 1),
    "model_parallel": ({"strategy": "model_parallel", "gpus": [0, 1]}, 1),
    "pipeline": ({"strategy": "pipeline", "gpus": [0, 1], "microbatches": 4}, 2),
}


def run(tmp_path: Path, strategy: str, precision: str, resume: Path | None = None) -> TrainerRun:
    parallel, nproc = LAYOUTS[strategy]
    spec = spec_with(BASE, parallel=parallel) | {"precision": precision}
    return train(tmp_path, spec, nproc=nproc, resume_path=resume, cuda_devices="0,1")


@two_gpus
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("strategy", list(LAYOUTS))
def test_strategy_trains_on_two_gpus(tmp_path: Path, strategy: str, precision: str) -> None:
    loss = run(tmp_path, strategy, precision).metric("loss")
    assert len(loss) == STEPS // 10 and loss[-1][1] < 0.5 * loss[0][1], loss


@two_gpus
def test_compiled_pipeline_stages_train_on_two_gpus(tmp_path: Path) -> None:
    parallel, nproc = LAYOUTS["pipeline"]
    spec = spec_with(BASE, parallel=parallel, performance={"compile": True, "channels_last": True})
    loss = train(tmp_path, spec | {"precision": "bf16"}, nproc=nproc, cuda_devices="0,1").metric("loss")
    assert len(loss) == STEPS // 10 and loss[-1][1] < 0.5 * loss[0][1], loss


@two_gpus
@pytest.mark.parametrize("target", ["model_parallel", "pipeline"])
def test_a_dp_checkpoint_resumes_under_other_strategies(tmp_path: Path, target: str) -> None:
    source = run(tmp_path / "dp", "dp", "bf16")
    resumed = run(tmp_path / target, target, "bf16", source.run_dir / CHECKPOINT_DIR / checkpoint_name(20))
    assert [step for step, _ in resumed.metric("loss")] == [30, 40]
    dp_loss = dict(source.metric("loss"))
    # bf16, and under pipeline BatchNorm sees micro-batches rather than the whole batch: the curves agree
    # in size, not digit for digit (CPU fp32 tests pin the exact match).
    for step, value in resumed.metric("loss"):
        assert abs(value - dp_loss[step]) < 0.25 * dp_loss[step], (step, value, dp_loss[step])


class DtypeProbe(nn.Module):
    """Records the dtype its Linear computes in, per device."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.seen: dict[int, torch.dtype] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        self.seen[out.device.index] = out.dtype
        return out


@two_gpus
@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_dp_replicas_compute_in_the_jobs_precision(precision: str, dtype: torch.dtype) -> None:
    probe = DtypeProbe()
    forward = DataParallelStrategy(GPU0).setup_module(probe)
    with MixedPrecision(Precision(precision), GPU0.device).autocast():
        forward(torch.randn(16, 8, device="cuda"))
    # Replicas are copies made per call; they share the probe's `seen` dict.
    assert probe.seen == dict.fromkeys(range(torch.cuda.device_count()), dtype)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_placed_module_trains_on_the_cpu_and_the_rest_on_the_gpu(precision: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    # The input side on the CPU, as with an embedding table: batches are delivered there.
    strategy = SingleDeviceStrategy(GPU0, {"0": DevicePlacement.CPU, "1": DevicePlacement.CPU})
    forward = strategy.setup_module(model)
    # The trainer's own optimizer: fused on CUDA, here over CPU and GPU parameters at once.
    optimizer = build_optimizer(model.parameters(), TrainSpec(lr=0.1), 0.1, GPU0.device)
    amp = MixedPrecision(Precision(precision), GPU0.device)
    x = torch.randn(256, 1, 8, 8, device=strategy.input_device)
    y = (x.flatten(1).sum(1) > 0).long()
    losses = []
    for _ in range(30):
        losses.append(strategy.forward_backward(forward, (x, y), CrossEntropy(), amp, divisor=1).loss.item())
        amp.step(optimizer)
        optimizer.zero_grad(set_to_none=True)
    assert strategy.input_device.type == "cpu"
    assert {p.device.type for p in model[1].parameters()} == {"cpu"}
    assert {p.device.type for p in model[3].parameters()} == {"cuda"}
    momentum = optimizer.state[model[1].weight]["momentum_buffer"]
    assert momentum.device.type == "cpu", "optimizer state follows its parameter"
    assert losses[-1] < 0.5 * losses[0], losses

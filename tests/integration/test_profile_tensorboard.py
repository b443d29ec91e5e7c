"""Under real torchrun (2 gloo ranks): a job reading MNIST-format files from TRAINYARD_DATA_DIR, with
activation checkpointing, the plateau schedule, TensorBoard and the profiler all on. Rank 0 writes the
TensorBoard scalars it reports and one profile; the plateau decay survives a resume from a checkpoint."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from jobspec.datadir import DATA_DIR_ENV
from jobspec.events import MetricsEvent, ProfileEvent
from jobspec.profile_summary import PROFILE_DIR, SUMMARY_FILE, TRACE_FILE, ProfileSummary
from tests.integration.trainer_helpers import TrainerRun, train
from trainers.tensorboard import TENSORBOARD_DIR

pytestmark = pytest.mark.integration

SPEC: dict[str, Any] = {
    "name": "mnist-files",
    "model": {"arch": "small_cnn", "kwargs": {"channels": 8}},
    "data": {"dataset": "mnist", "root": "mnist", "image_size": 12},
    "train": {
        "epochs": 4,
        "batch_size": 32,
        "lr": 0.2,
        "schedule": "plateau",
        "plateau_patience": 0,
        "gamma": 0.5,
        "seed": 0,
    },
    "parallel": {"strategy": "ddp", "nproc_per_node": 2},
    "performance": {"activation_checkpointing": True},
    "checkpoint": {"every_n_epochs": 1, "keep_last": 4},
    "metrics": {"every_n_steps": 2, "tensorboard": True},
    "profile": {"steps": 2, "skip_first": 1},
}


def _write_idx(path: Path, values: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, values.ndim]) + struct.pack(f">{values.ndim}i", *values.shape)
    path.write_bytes(header + values.astype(np.uint8).tobytes())


def _fake_mnist(root: Path) -> None:
    """Random pixels and labels: nothing to learn, so held-out loss stops improving and plateau decays."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, count in (("train", 256), ("t10k", 64)):
        _write_idx(root / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (count, 28, 28)))
        _write_idx(root / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, count))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("data")
    _fake_mnist(directory / "mnist")
    return directory


@pytest.fixture(scope="module")
def reference(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> TrainerRun:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DATA_DIR_ENV, str(data_dir))
        return train(tmp_path_factory.mktemp("run"), SPEC, nproc=2)


def _lr_by_step(run: TrainerRun) -> dict[int, float]:
    return dict(run.metric("lr"))


def test_tensorboard_holds_the_reported_scalars(reference: TrainerRun) -> None:
    files = list((reference.run_dir / TENSORBOARD_DIR).glob("events.out.tfevents.*"))
    assert len(files) == 1  # rank 0's only
    board = EventAccumulator(str(files[0]))
    board.Reload()
    assert {"loss", "lr", "samples_per_s", "eval_loss", "eval_accuracy"} <= set(board.Tags()["scalars"])
    for name in ("loss", "lr", "eval_loss"):
        scalars = {s.step: s.value for s in board.Scalars(name)}
        assert scalars == pytest.approx(dict(reference.metric(name)), rel=1e-6), name  # float32 in the file


def test_rank0_writes_one_profile_of_the_steps_asked_for(reference: TrainerRun) -> None:
    profiles = [e for e in reference.events() if isinstance(e, ProfileEvent)]
    assert [(e.first_step, e.steps) for e in profiles] == [(2, 2)]
    summary = ProfileSummary.model_validate_json((reference.run_dir / PROFILE_DIR / SUMMARY_FILE).read_text())
    assert summary.steps == 2 and summary.device == "cpu"
    names = {op.name for op in summary.top_cpu_ops}
    assert "aten::convolution_backward" in names or "ConvolutionBackward0" in names
    assert (reference.run_dir / PROFILE_DIR / TRACE_FILE).stat().st_size > 0


def test_plateau_decays_on_stalled_eval_and_resumes_with_its_decay(
    reference: TrainerRun, data_dir: Path, tmp_path: Path
) -> None:
    lrs = _lr_by_step(reference)
    assert min(lrs.values()) < SPEC["train"]["lr"]  # decayed at least once, by a power of gamma
    epoch2 = next(
        e
        for e in reference.events()
        if isinstance(e, MetricsEvent) and "eval_loss" in e.values and e.epoch == 2
    )
    checkpoint = reference.run_dir / "checkpoints" / f"step-{epoch2.step:08d}.pt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DATA_DIR_ENV, str(data_dir))
        resumed = train(tmp_path / "resumed", SPEC, nproc=2, resume_path=checkpoint)
    after = {step: lr for step, lr in _lr_by_step(resumed).items() if step > epoch2.step}
    assert after and after == pytest.approx({step: lrs[step] for step in after})

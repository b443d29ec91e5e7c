"""Streamed image_folder and shards under real torchrun (2 gloo ranks on CPU, 2 loader workers each), with
random resized crops and flips on the device.

Both layouts train to a falling loss, single and ddp; a ddp run resumed from its mid-epoch checkpoint
follows the uninterrupted run's loss curve step for step (rtol 1e-5, as the digits runs in
test_trainer_torchrun.py: same samples, same augmentation, only the order of float sums may differ). A rank
streaming an epoch of a folder whose decoded images take four times BOUND_MB peaks within BOUND_MB of one
streaming a folder a tenth its size: neither the set nor the batches already read are held.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from jobspec.data_plan import decoded_bytes
from jobspec.datadir import DATA_DIR_ENV
from tests.integration.trainer_helpers import TrainerRun, spec_with, train, train_together
from tests.unit.trainers.image_sets import Pictures, write_folder, write_shards

pytestmark = pytest.mark.integration

RTOL = 1e-5
LOAD = 128  # decoded side: the big folder's images take 4 x BOUND_MB decoded
BOUND_MB = 48
PICTURES = Pictures(count=400, classes=4, width=(36, 48), height=(30, 40))
# Two of its files are broken, and skipped: 4 x BOUND_MB of images in all, read in whole steps of 32.
BAD = ("class000/truncated.jpg", "class001/garbage.jpg")
BIG = Pictures(
    count=4 * BOUND_MB * 2**20 // decoded_bytes(1, LOAD) - len(BAD),
    classes=4,
    width=(36, 48),
    height=(30, 40),
)
# 360 training images: 11 steps of 16 per rank and epoch; the checkpoint at step 16 is mid-epoch 2.
STEPS, RESUME_AT = 22, 16

BASE: dict[str, Any] = {
    "name": "streamed",
    "model": {"arch": "small_cnn", "kwargs": {"channels": 8}},
    "data": {
        "dataset": "image_folder",
        "root": "folder",
        "placement": "stream",
        "image_size": 24,
        "load_size": LOAD,
        "val_fraction": 0.1,
        "augment": {"random_resized_crop": {"scale": [0.5, 1.0]}, "hflip": 0.5},
    },
    "train": {"epochs": 2, "batch_size": 32, "lr": 0.05, "seed": 0},
    "parallel": {"strategy": "ddp", "nproc_per_node": 2},
    "checkpoint": {"every_n_steps": RESUME_AT, "every_n_epochs": 0},
    "metrics": {"every_n_steps": 1},
}
SHARDS = {"dataset": "shards", "root": "shards"}
SINGLE = {"strategy": "single", "nproc_per_node": 1}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_folder(root / "folder", PICTURES)
    write_shards(root / "shards", PICTURES, per_shard=100)
    write_folder(root / "big", BIG)
    (root / "big" / BAD[0]).write_bytes(BIG.jpeg(0)[:200])
    (root / "big" / BAD[1]).write_bytes(b"not an image")
    return root


@pytest.fixture(scope="module")
def runs(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    variants = {
        "folder ddp": BASE,
        "folder single": spec_with(BASE, parallel=SINGLE),
        "shards ddp": spec_with(BASE, data=SHARDS),
        "shards single": spec_with(BASE, data=SHARDS, parallel=SINGLE),
        # A whole epoch of the big folder, read as "folder single" reads its small one.
        "big single": spec_with(
            BASE,
            data={"root": "big", "val_fraction": 0.0, "on_bad_sample": "skip"},
            parallel=SINGLE,
            train={"epochs": 1},
        ),
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DATA_DIR_ENV, str(data_dir))
        done = train_together(
            *(
                partial(
                    train,
                    tmp_path_factory.mktemp(name.replace(" ", "-")),
                    spec,
                    nproc=2 if "ddp" in name else 1,
                )
                for name, spec in variants.items()
            )
        )
    return dict(zip(variants, done, strict=True))


@pytest.mark.parametrize("name", ["folder ddp", "folder single", "shards ddp", "shards single"])
def test_streamed_sets_train_to_a_falling_loss(runs: dict[str, TrainerRun], name: str) -> None:
    run = runs[name]
    loss = [value for _, value in run.metric("loss")]
    assert len(loss) == STEPS and all(math.isfinite(v) for v in loss)
    assert sum(loss[-4:]) < 0.6 * sum(loss[:4]), loss
    assert run.metric("eval_accuracy")[-1][1] > 0.5, run.metric("eval_accuracy")
    assert "data: data.placement=stream: decoded per epoch by 2 loader workers" in run.log(0)


def test_a_mid_epoch_resume_follows_the_uninterrupted_curve(
    runs: dict[str, TrainerRun], data_dir: Path, tmp_path: Path
) -> None:
    reference = runs["shards ddp"]
    checkpoint = reference.run_dir / "checkpoints" / f"step-{RESUME_AT:08d}.pt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DATA_DIR_ENV, str(data_dir))
        resumed = train(tmp_path, spec_with(BASE, data=SHARDS), 2, resume_path=checkpoint)
    expected = [(step, loss) for step, loss in reference.metric("loss") if step > RESUME_AT]
    got = resumed.metric("loss")
    assert (
        [step for step, _ in got] == [step for step, _ in expected] == list(range(RESUME_AT + 1, STEPS + 1))
    )
    for (step, a), (_, b) in zip(got, expected, strict=True):
        assert math.isclose(a, b, rel_tol=RTOL), f"step {step}: {a} vs {b}"
    assert math.isclose(resumed.parameter_sum(), reference.parameter_sum(), rel_tol=RTOL)


def test_a_rank_streaming_a_folder_four_times_the_bound_stays_within_it(runs: dict[str, TrainerRun]) -> None:
    assert decoded_bytes(BIG.count + len(BAD), LOAD) > 4 * BOUND_MB * 2**20 - decoded_bytes(1, LOAD)
    small, big = (
        max(value for _, value in runs[name].metric("peak_mem_mb"))
        for name in ("folder single", "big single")
    )
    assert big - small < BOUND_MB, (small, big)


def test_bad_files_are_skipped_counted_and_named_in_the_log(runs: dict[str, TrainerRun]) -> None:
    big = runs["big single"]
    assert big.metric("bad_samples")[-1] == (len(big.metric("loss")), len(BAD))
    log = big.log(0)
    assert all(f"skipped a bad sample: $TRAINYARD_DATA_DIR/big/{name} cannot be read" in log for name in BAD)
    assert not runs["folder single"].metric("bad_samples")  # counted only where data.on_bad_sample=skip

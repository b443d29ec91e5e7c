"""data.decode=auto (issue 48): the default; the plan states its rule; at start a rank times one loader
worker on the job's own JPEGs and, only when its workers fall short of what the model takes by its
forecast, splits each batch between them and the GPU in the part they supply (all on the GPU when that part
is under a sixteenth); never where the GPU cannot decode (a CPU job, files that are not JPEGs)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from jobspec.decode_plan import (
    GPU_DECODE_KEEPS,
    GPU_DECODES_ALL,
    WORKERS_DECODE_ALL,
    Supply,
    choose_decode,
    decoding_workers,
    images_needed,
    split_share,
)
from jobspec.forecast import Forecast
from jobspec.plan import Plan, resolve_plan
from jobspec.spec import JobSpec
from jobspec.spec_augment import Decode
from tests.unit.trainers.image_sets import Pictures, write_folder
from trainers.data import decode_choice
from trainers.data.decode_choice import auto_decode, worker_supply, workers_share
from trainers.data.image_folder import open_set
from trainers.data.images import ImageSet

GPU, CPU = torch.device("cuda"), torch.device("cpu")  # a device named, never touched
FOLDER = {"dataset": "image_folder", "root": "pets", "load_size": 16, "placement": "stream"}


def job(gpus: list[int] | None = None, **data: Any) -> JobSpec:
    parallel = {"gpus": gpus} if gpus else {"nproc_per_node": 1}
    return JobSpec.model_validate(
        {
            "model": {"arch": "mlp"},
            "data": {**FOLDER, **data},
            "train": {"batch_size": 64},
            "parallel": parallel,
        }
    )


def forecast(plan: Plan, step_time_s: float) -> Plan:
    figures = Forecast(peak_memory_bytes=1, step_time_s=step_time_s, fits=True, basis="a test's")
    return plan.model_copy(update={"forecast": figures})


def test_a_slow_cpu_under_a_fast_model_splits_with_the_gpu_and_plenty_of_cpu_decodes_alone() -> None:
    starved = choose_decode("cuda", needed=10_000, supply=Supply(per_worker=700, workers=4, asked=4))
    assert starved.decode is Decode.GPU and starved.workers_share == 3 / 16  # 2,800 / 12,800, rounded down
    assert starved.reason.startswith("split (workers 19%, GPU 81%): ")
    assert "4 loader workers decode 2,800 img/s (700 each, timed), below 85%" in starved.reason
    assert "the workers decode 19% of each batch" in starved.reason
    assert "of the 10,000 img/s the model takes" in starved.reason
    capped = choose_decode("cuda", 10_000, Supply(per_worker=700, workers=1, asked=14))
    assert "1 loader worker at once (of 14: the host's cores per rank) decodes 700 img/s" in capped.reason
    plenty = choose_decode("cuda", needed=10_000, supply=Supply(per_worker=700, workers=14, asked=14))
    assert plenty.decode is Decode.CPU and plenty.workers_share == WORKERS_DECODE_ALL
    assert plenty.reason.startswith("cpu: ") and "at least 85%" in plenty.reason
    # Under a sixteenth of theirs and the model's rates together, the GPU decodes all, as data.decode=gpu.
    hopeless = choose_decode("cuda", needed=10_000, supply=Supply(per_worker=600, workers=1, asked=1))
    assert hopeless.workers_share == GPU_DECODES_ALL and hopeless.reason.startswith("gpu: ")
    # Just short of the need, the CPUs still win: decoding on the GPU slows its steps more.
    assert choose_decode("cuda", 10_000, Supply(10_000 * GPU_DECODE_KEEPS, 1, 1)).decode is Decode.CPU


@pytest.mark.parametrize(
    ("device", "needed", "supply", "why"),
    [
        ("cpu", 10_000.0, None, "a CPU job's loader workers decode"),
        ("cuda", None, None, "no forecast step time"),
        ("cuda", 10_000.0, "x.png is not a JPEG, which nvJPEG cannot decode", "x.png is not a JPEG"),
    ],
)
def test_auto_decodes_on_the_workers_where_the_gpu_cannot_or_nothing_says_it_should(
    device: str, needed: float | None, supply: str | None, why: str
) -> None:
    choice = choose_decode(device, needed, supply)
    assert choice.decode is Decode.CPU and why in choice.reason


@pytest.mark.parametrize(
    ("supplied", "needed", "share"),
    [
        (3_571, 11_240, 3 / 16),  # issue 48's 4 workers beside ResNet-50 at 128 px: 0.241, rounded down
        (5_000, 10_000, 5 / 16),
        (10_000, 10_000, 0.5),  # as fast as the model: half each
        (600, 10_000, 0.0),  # under a sixteenth: the GPU alone
        (0, 10_000, 0.0),
    ],
)
def test_the_workers_share_is_their_rate_over_theirs_and_the_models_rounded_down_to_sixteenths(
    supplied: float, needed: float, share: float
) -> None:
    assert split_share(supplied, needed) == share


def test_the_need_is_the_batch_per_forecast_step_and_the_workers_fit_the_cores_per_rank() -> None:
    assert images_needed(256, 0.025) == pytest.approx(10_240) and images_needed(256, None) is None
    assert decoding_workers(14, cores=16, ranks_per_host=1) == 14  # the training loop keeps one core
    assert decoding_workers(14, cores=16, ranks_per_host=8) == 1  # two cores a GPU: one for the loop
    assert decoding_workers(0, cores=16, ranks_per_host=1) == 1  # the rank's own process decodes


def test_a_spec_without_decode_plans_auto_and_the_plan_states_its_rule() -> None:
    assert job().inputs.data.decode is Decode.AUTO
    reason = resolve_plan(job(gpus=[0])).data_reason
    assert "data.decode=auto decides at start" in reason and f"under {GPU_DECODE_KEEPS:.0%}" in reason
    assert "forecast's step time" in reason, reason
    assert "each batch is split: the workers decode their rate / (their rate + the model's)" in reason
    held_or_streamed = resolve_plan(job(gpus=[0], placement="auto")).data_reason
    assert "decoded per epoch by 2 loader workers, the GPU (nvJPEG) or both" in held_or_streamed
    # auto on a CPU job, or on a set never streamed, is the workers' decoding, never a refusal.
    assert "decoded per epoch by 2 loader workers" in resolve_plan(job()).data_reason
    resolve_plan(JobSpec.model_validate({"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}}))


@pytest.mark.parametrize(
    ("decode", "reader"), [("cpu", "by 2 loader workers"), ("gpu", "by the GPU (nvJPEG)")]
)
def test_an_explicit_decode_plans_as_before(decode: str, reader: str) -> None:
    reason = resolve_plan(job(gpus=[0], decode=decode)).data_reason
    assert reason == f"data.placement=stream: decoded per epoch {reader}"


def test_the_trainer_times_one_worker_on_the_jobs_own_jpegs_and_decides(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_folder(data_dir / "pets", Pictures(count=24, classes=3, width=(40, 56), height=(36, 48)))
    spec = job(gpus=[0], loader_workers=2)
    images = open_set(spec.inputs.data, seed=0)
    supply = worker_supply(spec, resolve_plan(spec), images)
    assert isinstance(supply, Supply) and supply.per_worker > 0 and supply.workers >= 1
    # Each choice below times the workers again; on a loaded box two timings of 24 small images differed by
    # more than the margins the choices are asked at. The rate just measured stands for them.
    monkeypatch.setattr(decode_choice, "decode_rate", lambda raws, side: supply.per_worker)
    # A model that takes a million images a second outruns two workers; one that takes ten, never.
    share = workers_share(spec, forecast(resolve_plan(spec), step_time_s=64 / 1e6), images, GPU)
    line = capsys.readouterr().out
    assert line.startswith("data: data.decode=auto: gpu: ") and "1,000,000 img/s the model takes" in line
    assert share == GPU_DECODES_ALL
    slow = forecast(resolve_plan(spec), step_time_s=64 / 10)
    assert workers_share(spec, slow, images, GPU) == WORKERS_DECODE_ALL
    # One that takes a little more than the workers give: they decode their part, the GPU the rest.
    supplied = supply.per_worker * supply.workers
    near = forecast(resolve_plan(spec), step_time_s=64 / (supplied * 2.5))
    assert 0 < workers_share(spec, near, images, GPU) < 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("data: data.decode=auto: split (workers ")
    # No forecast, or a CPU job: nothing is timed, and the workers decode.
    assert auto_decode(spec, resolve_plan(spec), images, GPU).decode is Decode.CPU
    cpu_job = job()
    assert auto_decode(cpu_job, forecast(resolve_plan(cpu_job), 1e-6), images, CPU).decode is Decode.CPU


class Pngs:
    """Decodable images that nvJPEG cannot read."""

    labels = np.arange(4)

    def __len__(self) -> int:
        return 4

    def read(self, index: int) -> bytes:
        out = io.BytesIO()
        Image.new("RGB", (8, 8), (index, 0, 0)).save(out, "PNG")
        return out.getvalue()

    def name(self, index: int) -> str:
        return f"picture-{index}.png"


def test_files_that_are_not_jpegs_are_decoded_by_the_workers() -> None:
    spec = job(gpus=[0])
    images = ImageSet(Pngs(), 2, np.arange(4), np.arange(0))
    choice = auto_decode(spec, forecast(resolve_plan(spec), 1e-6), images, GPU)
    assert choice.decode is Decode.CPU and "picture-0.png is not a JPEG" in choice.reason


def test_explicit_decode_is_used_as_given() -> None:
    images = ImageSet(Pngs(), 2, np.arange(4), np.arange(0))
    for decode, share in (("cpu", WORKERS_DECODE_ALL), ("gpu", GPU_DECODES_ALL)):
        spec = job(gpus=[0], decode=decode)
        assert workers_share(spec, forecast(resolve_plan(spec), 1e-6), images, GPU) == share

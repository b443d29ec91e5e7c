"""Where a job's data lives and how it is read, as the plan states it, and the data options that do not fit
the rest of the spec. No torch: the API plans with this, and the rank applies the same rule once it knows
the file count and its free memory (trainers/data/images.py).

A built-in dataset is held whole (resident) on the device, or in host memory with data.placement=cpu: the
fast path. image_folder and shards can also be streamed: decoded per epoch by loader workers or the GPU
(data.decode; under auto, jobspec/decode_plan.py's rule decides at start), never held whole.
data.placement=auto keeps them resident when their decoded size, files x 3 x data.load_size^2 bytes, is at
most RESIDENT_SHARE of the memory they would live in: the GPU's free memory on a GPU job; on a CPU job the
host's available memory shared by the host's ranks (each holds a copy).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum

from jobspec.catalog.datasets import DATASETS, InputKind
from jobspec.decode_plan import auto_rule
from jobspec.problems import Problem
from jobspec.spec import DataPlacement, DataSpec, JobSpec, Loss, Strategy
from jobspec.spec_augment import Decode

DEFAULT_SIDE = 64  # image_folder's and shards' decoded side when the spec gives none
RESIDENT_SHARE = 0.25  # of the memory a resident dataset would fill, at most, under data.placement=auto
CHANNELS = 3  # image_folder and shards are decoded as RGB


class DataPath(StrEnum):
    RESIDENT = "resident"  # held whole, batches cut on the device
    STREAM = "stream"  # decoded per epoch by loader workers or the GPU
    BY_SIZE = "by_size"  # image_folder, shards under auto: resident if it fits, decided at start
    LOADER = "loader"  # a data.factory's datasets, through DataLoaders


def load_side(data: DataSpec) -> int:
    """The side image_folder and shards decode to: what the CPU does before batching."""
    return data.load_size or data.image_size or DEFAULT_SIDE


def decoded_bytes(files: int, side: int) -> int:
    """What a set of RGB uint8 images at side x side takes, held whole."""
    return files * CHANNELS * side * side


def _size(count: int) -> str:
    return f"{count / 2**30:,.1f} GiB" if count >= 2**30 else f"{count / 2**20:,.1f} MiB"


def fits(files: int, side: int, free_bytes: int) -> tuple[bool, str]:
    """Whether a set stays resident under auto, and the reason in words."""
    need, budget = decoded_bytes(files, side), int(free_bytes * RESIDENT_SHARE)
    verdict = "at most" if need <= budget else "more than"
    reason = (
        f"{files:,} images at {side} px take {_size(need)} decoded, {verdict} {RESIDENT_SHARE:.0%} of the "
        f"{_size(free_bytes)} free"
    )
    return need <= budget, reason


def stream_reader(data: DataSpec, device: str) -> str:
    """Who decodes a streamed set, or under data.decode=auto on a GPU job, by what rule it is decided."""
    if data.decode is Decode.GPU:
        return "the GPU (nvJPEG)"
    if data.decode is Decode.AUTO and device == "cuda":
        return auto_rule(data.loader_workers)
    return f"{data.loader_workers} loader workers"


def plan_data(spec: JobSpec, device: str) -> tuple[DataPath, str]:
    """How the job's data is read, and why."""
    data = spec.inputs.data
    if data.dataset is None:
        return DataPath.LOADER, "data.factory's datasets go through DataLoaders"
    if DATASETS[data.dataset].input is InputKind.TOKENS:
        return DataPath.LOADER, f"{data.dataset} is read through DataLoaders, a window at a time"
    if not DATASETS[data.dataset].streams:
        return DataPath.RESIDENT, f"{data.dataset} is held whole"
    if data.placement is DataPlacement.STREAM:
        return DataPath.STREAM, f"data.placement=stream: decoded per epoch by {stream_reader(data, device)}"
    if data.placement is not DataPlacement.AUTO:
        return DataPath.RESIDENT, f"data.placement={data.placement}: decoded once, held whole"
    where = "the GPU's free memory" if device == "cuda" else "the host's available memory per rank"
    side = load_side(data)
    return DataPath.BY_SIZE, (
        f"data.placement=auto: held whole if its decoded size (files x {decoded_bytes(1, side):,} bytes at "
        f"{side} px) is at most {RESIDENT_SHARE:.0%} of {where} when the job starts, else streamed, decoded "
        f"per epoch by {stream_reader(data, device)}"
    )


def _stream_problems(spec: JobSpec, strategy: Strategy, device: str) -> Iterator[Problem]:
    data = spec.inputs.data
    path, _ = plan_data(spec, device)
    streams = data.dataset is not None and DATASETS[data.dataset].streams
    if data.placement is DataPlacement.STREAM and path is DataPath.RESIDENT:
        yield Problem(
            "data.placement",
            f"data.placement=stream reads image_folder or shards per epoch; {data.dataset} is held whole",
            "use auto, gpu or cpu",
        )
    if data.placement is DataPlacement.STREAM and strategy is Strategy.HOGWILD:
        yield Problem(
            "data.placement",
            "parallel.strategy=hogwild's workers share one resident dataset",
            "drop data.placement=stream, or use strategy ddp",
        )
    if data.decode is Decode.GPU and device == "cpu":
        yield Problem("data.decode", "data.decode=gpu needs a GPU, and this job runs on the CPU", "drop it")
    elif data.decode is Decode.GPU and not streams:
        yield Problem("data.decode", "data.decode=gpu decodes image_folder or shards", "drop it")


def _augment_problems(spec: JobSpec, strategy: Strategy) -> Iterator[Problem]:
    augment, dataset = spec.inputs.data.augment, spec.inputs.data.dataset
    if augment is None:
        return
    info = None if dataset is None else DATASETS[dataset]
    if info is None or not info.mean:
        augmentable = ", ".join(name for name, entry in DATASETS.items() if entry.mean)
        yield Problem(
            "data.augment",
            f"data.augment applies to {augmentable}; {dataset or 'data.factory'} is not augmented",
            "drop it (a data.factory augments in its own dataset)",
        )
    elif augment.normalize is not None and len(augment.normalize.mean) not in (1, len(info.mean)):
        yield Problem(
            "data.augment.normalize",
            f"{dataset} images have {len(info.mean)} channel(s) and data.augment.normalize gives "
            f"{len(augment.normalize.mean)} means",
            "give one value for every channel" + (f", or {len(info.mean)}" if len(info.mean) > 1 else ""),
        )
    if strategy is Strategy.HOGWILD:
        yield Problem(
            "data.augment", "parallel.strategy=hogwild's workers do not augment", "drop it, or use ddp"
        )
    for field, alpha in (("mixup", augment.mixup), ("cutmix", augment.cutmix)):
        if alpha and spec.train.loss != Loss.CROSS_ENTROPY:
            yield Problem(
                f"data.augment.{field}",
                f"data.augment.{field} mixes labels, which train.loss={spec.train.loss} cannot take",
                "use train.loss cross_entropy, or set it to 0",
            )


def data_problems(spec: JobSpec, strategy: Strategy, device: str) -> Iterator[Problem]:
    """The data options that do not fit the dataset, the strategy or the device."""
    yield from _stream_problems(spec, strategy, device)
    yield from _augment_problems(spec, strategy)

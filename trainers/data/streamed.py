"""image_folder and shards, held whole or streamed (jobspec/data_plan.py says which and why), and the
training steps and held-out batches of a streamed set.

Streamed, a set is a map-style dataset read through the factories' loader machinery (SampledSteps): each
epoch's order depends on (train.seed, epoch) alone, sharded by DistributedSampler over the ranks (drop_last:
the tail beyond ranks x floor(samples / ranks) is not seen that epoch, nor the samples of a rank's last
incomplete step), and a rank's loader workers split its batches between them, so each sample of the
epoch's shards is read once. A resumed job starts at its step's epoch and position and reads none of the
skipped samples. Loader workers decode into pinned memory (on a GPU job), each two batches ahead of the
step; the copy to the device is asynchronous. With data.decode=gpu they read bytes only, and the GPU decodes
each batch on a stream of its own, the next training batch in a thread while the current one trains; under
auto's split (trainers/data/decode_choice.py) they decode part of each batch, the GPU the rest, in that
thread too.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from jobspec.data_plan import DataPath, fits, load_side, plan_data
from jobspec.decode_plan import WORKERS_DECODE_ALL
from jobspec.plan import Plan
from jobspec.spec import JobSpec
from jobspec.spec_augment import OnBadSample
from trainers.data import SOURCES, LoadedData, View
from trainers.data.augment import Transform, Transformed
from trainers.data.batches import Batch, Counts, no_counts
from trainers.data.decode import Encoded, OnDevice, Split, decode_on_device
from trainers.data.decode_choice import workers_share
from trainers.data.held_out import AnyLeft, LoaderHeldOut, Shard
from trainers.data.images import BadSamples, DecodedImages, ImageSet, collate, decode_whole
from trainers.data.steps import Batching, SampledSteps
from trainers.data.user import UserData
from trainers.dist_env import DistEnv


@dataclass(frozen=True)
class StreamedImages:
    """A streamed set: its splits as datasets for the loader, and what sizes the model."""

    data: UserData
    num_classes: int
    native_size: int  # the decoded side
    channels: int = 3
    tokens: bool = False
    # Of each batch, what the loader workers decode; the device decodes the rest from the bytes they read.
    workers_share: float = WORKERS_DECODE_ALL


def free_memory(device: torch.device, ranks_per_host: int) -> int:
    """Bytes a resident set may take a share of: the GPU's free memory, or the host's available memory
    shared by its ranks (each holds its own copy)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    available_kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable:"))
    return available_kib * 1024 // ranks_per_host


def streams(spec: JobSpec, files: int, device: torch.device, ranks_per_host: int) -> tuple[bool, str]:
    """The plan's data path, with data.placement=auto decided by the set's size against the memory."""
    path, reason = plan_data(spec, device.type)
    if path is not DataPath.BY_SIZE:
        return path is DataPath.STREAM, reason
    held, why = fits(files, load_side(spec.inputs.data), free_memory(device, ranks_per_host))
    return not held, f"data.placement=auto: {why}: {'held whole' if held else 'streamed'}"


def streamed_images(spec: JobSpec, images: ImageSet, *, workers_share: float) -> StreamedImages:
    """The set ready to stream: `workers_share` of it decoded by the loader workers, the rest read as bytes
    for the GPU."""
    data, side = spec.inputs.data, load_side(spec.inputs.data)
    replace = data.on_bad_sample is OnBadSample.SKIP
    train, val = (
        DecodedImages(images.samples, indices, side, workers_share, replace)
        for indices in (images.train, images.val)
    )
    reader = UserData(f"data.dataset {data.dataset}", None, train, val if len(val) else None, collate)
    return StreamedImages(reader, images.num_classes, side, workers_share=workers_share)


def load_images(spec: JobSpec, plan: Plan, device: torch.device) -> LoadedData | StreamedImages:
    """image_folder or shards, listed (or indexed), then decoded whole or made ready to stream, its decoder
    chosen (data.decode)."""
    assert spec.inputs.data.dataset is not None
    open_set = SOURCES[spec.inputs.data.dataset].images
    assert open_set is not None, f"{spec.inputs.data.dataset} is not read from image files"
    images = open_set(spec.inputs.data, spec.train.seed)
    stream, reason = streams(spec, len(images.samples), device, plan.nproc_per_node)
    print(f"data: {reason}", flush=True)
    if stream:
        return streamed_images(spec, images, workers_share=workers_share(spec, plan, images, device))
    train_x, train_y, val_x, val_y = decode_whole(images, spec.inputs.data, load_side(spec.inputs.data))
    return LoadedData((train_x, train_y), (val_x, val_y), images.num_classes)


def on_device(batch: Batch, side: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """A batch's pixels and labels on the device, copied (asynchronously from pinned memory) or decoded
    there (now, or ahead by `decoded_ahead`), and its bad samples: those the loader workers found, or the
    device's decoder."""
    images, labels, problems = batch
    if isinstance(images, Encoded | Split):
        images = decode_on_device(images, side, device)
    if not isinstance(images, OnDevice):
        return images.to(device, non_blocking=True), labels.to(device, non_blocking=True), problems
    decoded = images.received()
    found = [worker or decoder for worker, decoder in zip(problems, decoded.problems, strict=True)]
    # Labels follow their replacements on the host, and only where a file was replaced: a device tensor
    # indexed by a list, or a copy from unpinned memory, can wait for the stream and the step queued on it.
    if decoded.sources != list(range(len(labels))):
        labels = labels[decoded.sources]
    return decoded.pixels, labels.to(device, non_blocking=True), found


def decoded_ahead(batches: Iterator[Batch], side: int, device: torch.device) -> Iterator[Batch]:
    """The batches with their JPEGs decoded on the device one batch ahead, in a thread: nvJPEG's call holds
    its thread until its batch is decoded, time the training thread spends queueing the current step."""

    def decode(batch: Batch) -> Batch:
        images, labels, problems = batch
        # Under a split, a batch may hold only squares the workers decoded: copied like any other.
        if isinstance(images, torch.Tensor):
            return batch
        return decode_on_device(images, side, device), labels, problems

    # Leaving early (an epoch's last step, a failure) waits for the batch in the thread: none outlives it.
    with ThreadPoolExecutor(1, thread_name_prefix="decode") as thread:
        ahead: Future[Batch] | None = None
        for batch in batches:
            queued = thread.submit(decode, batch)
            if ahead is not None:
                yield ahead.result()
            ahead = queued
        if ahead is not None:
            yield ahead.result()


class ImageSteps(SampledSteps):
    """SampledSteps over a streamed set: the workers' reports of bad files go to data.on_bad_sample, the
    labels and pixels to the device, as uint8 for trainers/data/augment.py."""

    def __init__(self, images: StreamedImages, env: DistEnv, batching: Batching, bad: BadSamples) -> None:
        super().__init__(images.data, env, batching)
        self.side = images.native_size
        self.decodes = images.workers_share < WORKERS_DECODE_ALL  # the device decodes (part of) each batch
        self.bad = bad

    def epoch(self, epoch: int) -> Iterator[Batch]:
        batches = super().epoch(epoch)
        return decoded_ahead(batches, self.side, self.batching.device) if self.decodes else batches

    def on_device(self, batch: Batch) -> Batch:
        pixels, labels, problems = on_device(batch, self.side, self.batching.device)
        self.bad.check(problems)
        return pixels, labels


class StreamedHeldOut:
    """The held-out split through the loader (trainers/data/held_out.py), prepared by `view`."""

    def __init__(self, images: StreamedImages, batching: Batching, view: View, bad: BadSamples) -> None:
        self.loader = LoaderHeldOut(images.data, batching.workers, batching.device)
        self.side = images.native_size
        self.device = batching.device
        self.view = view
        self.bad = bad

    @property
    def empty(self) -> bool:
        return self.loader.empty

    def shard(self, env: DistEnv, batch_size: int, any_left: AnyLeft) -> Shard:
        for batch, counted in self.loader.shard(env, batch_size, any_left):
            pixels, labels, problems = on_device(batch, self.side, self.device)
            if counted:  # the uncounted repeats that keep ranks in step were checked the first time
                self.bad.check(problems)
            yield (self.view.prepare(pixels), labels), counted


def streamed_feeds(
    images: StreamedImages, spec: JobSpec, env: DistEnv, batching: Batching, views: tuple[Transform, View]
) -> tuple[Transformed, StreamedHeldOut, Counts]:
    """The training steps and the held-out split of a streamed set, and the count of the bad samples both
    skipped (the metric bad_samples)."""
    bad = BadSamples(spec.inputs.data.on_bad_sample)
    train, held_out = views
    steps = ImageSteps(images, env, batching, bad)
    counts = no_counts if bad.policy is OnBadSample.FAIL else lambda: {"bad_samples": bad.count}
    return Transformed(steps, train), StreamedHeldOut(images, batching, held_out, bad), counts

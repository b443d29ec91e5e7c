"""Streamed image sets through the loader: sharding over ranks and loader workers, exact resume mid-epoch
(samples and augmentation), bad samples skipped or failed, and the same batches as the resident path.

The samples are tiny PNGs whose label is their index, so a batch's labels say which samples it holds.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from functools import partial
from itertools import islice

import numpy as np
import pytest
import torch
from PIL import Image

from jobspec.decode_plan import GPU_DECODES_ALL, WORKERS_DECODE_ALL
from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec
from jobspec.spec_augment import Decode, OnBadSample
from tests.unit.trainers.image_sets import IndexedSamples
from trainers.components import feeds
from trainers.data import LoadedData
from trainers.data.decode import Encoded, decode_on_device
from trainers.data.images import BadSamples, ImageSet, decode_whole
from trainers.data.steps import Batching
from trainers.data.streamed import ImageSteps, StreamedImages, streamed_images
from trainers.dist_env import DistEnv
from trainers.strategies.single import SingleDeviceStrategy

CPU = torch.device("cpu")
SIDE = 4


def coloured(index: int, format: str = "PNG") -> bytes:
    """A picture of colour (index, 0, 0)."""
    out = io.BytesIO()
    Image.new("RGB", (SIDE, SIDE), (index % 256, 0, 0)).save(out, format)
    return out.getvalue()


def numbered(count: int, bad: frozenset[int] = frozenset(), format: str = "PNG") -> IndexedSamples:
    """Samples 0..count-1: a picture of colour (index, 0, 0) labelled with its index."""
    return IndexedSamples(count, partial(coloured, format=format), bad)


def job(workers: int = 0, on_bad_sample: str = "fail", augment: bool = False, decode: str = "cpu") -> JobSpec:
    data = {
        "dataset": "image_folder",
        "root": "unused",
        "image_size": SIDE,
        "loader_workers": workers,
        "on_bad_sample": on_bad_sample,
        "placement": "stream",
        "decode": decode,
    }
    if augment:
        data["augment"] = {"random_resized_crop": {"scale": [0.5, 1.0]}, "hflip": 0.5}
    return JobSpec.model_validate(
        {"model": {"arch": "mlp"}, "data": data, "train": {"batch_size": 16, "grad_accum_steps": 2}}
    )


def streamed(spec: JobSpec, samples: IndexedSamples) -> StreamedImages:
    images = ImageSet(samples, samples.count, np.arange(samples.count), np.arange(0))
    share = GPU_DECODES_ALL if spec.data.decode is Decode.GPU else WORKERS_DECODE_ALL
    return streamed_images(spec, images, workers_share=share)


def steps(
    samples: IndexedSamples, rank: int = 0, world: int = 1, workers: int = 0, **job_args: str
) -> ImageSteps:
    spec = job(workers, **job_args)
    batching = Batching(per_rank_batch=8, micro_batch=4, seed=5, workers=workers, device=CPU)
    env = DistEnv(rank=rank, local_rank=rank, world_size=world, device=CPU)
    return ImageSteps(streamed(spec, samples), env, batching, BadSamples(spec.data.on_bad_sample))


def labels(step: list[tuple[torch.Tensor, torch.Tensor]]) -> list[int]:
    return [int(label) for _, y in step for label in y]


def test_two_ranks_with_two_workers_each_see_every_sample_of_an_epoch_once() -> None:
    samples = numbered(103)
    seen = []
    for rank in (0, 1):
        shard = steps(samples, rank=rank, world=2, workers=2)
        assert shard.steps_per_epoch == 6  # 103 // 2 = 51 samples a rank, 6 whole steps of 8
        seen.append([label for step in islice(shard.from_step(0), 6) for label in labels(step)])
    assert not set(seen[0]) & set(seen[1])
    assert len(set(seen[0])) == len(set(seen[1])) == 48
    # drop_last: 103 - 2 x 6 x 8 = 7 samples, a different 7 each epoch, are not seen in this one.
    assert len(set(range(103)) - set(seen[0]) - set(seen[1])) == 7


def test_a_resumed_run_reads_exactly_the_rest_of_the_epoch_and_augments_it_alike() -> None:
    spec = job(augment=True)
    data = streamed(spec, numbered(40))
    strategy = SingleDeviceStrategy(DistEnv(rank=0, local_rank=0, world_size=1, device=CPU))
    plan = resolve_plan(spec)

    def run(done: int) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
        return feeds(spec, plan, strategy, data, channels_last=False)[0].from_step(done)

    whole = list(islice(run(0), 8))  # 2 steps an epoch of 40 // 16: four epochs
    resumed = list(islice(run(3), 5))
    assert [labels(step) for step in resumed] == [labels(step) for step in whole[3:]]
    for again, first in zip(resumed, whole[3:], strict=True):
        assert all(torch.equal(a[0], b[0]) for a, b in zip(again, first, strict=True))
    assert labels(whole[0]) != labels(whole[2])  # every epoch in its own order


def test_a_bad_sample_is_replaced_and_counted_under_skip() -> None:
    bad = frozenset({3, 4})
    reader = steps(numbered(32, bad), on_bad_sample=OnBadSample.SKIP)
    epoch = [labels(step) for step in islice(reader.from_step(0), 4)]
    assert all(len(step) == 8 for step in epoch)
    flat = [label for step in epoch for label in step]
    assert not bad & set(flat) and len(set(flat)) == 30
    assert reader.bad.count == 2


def test_a_bad_sample_fails_the_job_naming_it_under_fail() -> None:
    reader = steps(numbered(32, frozenset({7})))
    with pytest.raises(ValueError, match=r"data.on_bad_sample=fail: sample-7 cannot be read .*set data"):
        list(islice(reader.from_step(0), 4))


def test_the_resident_path_cuts_the_same_batches_as_the_stream() -> None:
    spec = job(augment=True)
    samples = numbered(40)
    images = ImageSet(samples, samples.count, np.arange(40), np.arange(0))
    train_x, train_y, val_x, val_y = decode_whole(images, spec.data, SIDE)
    resident = LoadedData((train_x, train_y), (val_x, val_y), samples.count)
    strategy = SingleDeviceStrategy(DistEnv(rank=0, local_rank=0, world_size=1, device=CPU))
    plan = resolve_plan(spec)
    held, stream = (
        list(islice(feeds(spec, plan, strategy, data, channels_last=False)[0].from_step(0), 3))
        for data in (resident, streamed(spec, samples))
    )
    for a, b in zip(held, stream, strict=True):
        assert all(torch.equal(x, y) and torch.equal(p, q) for (x, p), (y, q) in zip(a, b, strict=True))


def test_the_resident_path_drops_skipped_samples_and_fails_on_them_otherwise() -> None:
    samples = numbered(10, frozenset({2}))
    images = ImageSet(samples, samples.count, np.arange(8), np.arange(8, 10))
    train_x, train_y, val_x, _ = decode_whole(images, job(on_bad_sample="skip").data, SIDE)
    assert train_y.tolist() == [0, 1, 3, 4, 5, 6, 7] and train_x.shape == (7, 3, SIDE, SIDE)
    assert (train_x[:, 0, 0, 0] == train_y).all() and len(val_x) == 2
    with pytest.raises(ValueError, match="sample-2 cannot be read"):
        decode_whole(images, job().data, SIDE)


def test_jpeg_bytes_batched_for_the_device_decode_there_with_bad_ones_replaced_and_named() -> None:
    """data.decode=gpu's path, on the CPU: torchvision decodes lists of JPEGs alike on either device."""
    bad = frozenset({3})
    reader = steps(numbered(16, bad, format="JPEG"), on_bad_sample="skip", decode="gpu")
    epoch = list(islice(reader.from_step(0), 2))
    micro_batches = [micro for step in epoch for micro in step]
    assert all(x.shape == (4, 3, SIDE, SIDE) and x.dtype == torch.uint8 for x, _ in micro_batches)
    for x, y in micro_batches:  # a JPEG keeps a flat colour's red within a few levels: labels followed
        assert ((x[:, 0].float().mean(dim=(1, 2)) - y.float()).abs() < 4).all()
    assert reader.bad.count == 1
    garbage = torch.frombuffer(bytearray(b"\xff\xd8\xff" + b"garbage" * 9), dtype=torch.uint8)
    good = torch.frombuffer(bytearray(numbered(2, format="JPEG").read(1)), dtype=torch.uint8)
    decoded = decode_on_device(Encoded.packed([garbage, good], ["x.jpg", "y.jpg"]), SIDE, CPU)
    assert decoded.pixels.shape == (2, 3, SIDE, SIDE) and decoded.sources == [1, 1]
    assert decoded.problems == ["x.jpg cannot be decoded (Unsupported marker type 0x67)", ""]

"""data.decode=auto's split (trainers/data/decode.py's Split), on the CPU: the loader workers decode the
samples `worker_decodes` picks and the device the rest, and each batch comes back whole in its order, the
workers' images exactly as data.decode=cpu gives them and the device's as data.decode=gpu does (within the
batched resize's rounding), labels aligned; bad files of either part are handled as each path handles its
own; a resumed run reads and augments exactly what the whole run did.

The pictures are labelled with their index, each a colour, noise and a box of its own, so a batch's labels
say which files it holds and an image put in the wrong place is far from its label's picture.
"""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest
import torch

from jobspec.decode_plan import GPU_DECODES_ALL, WORKERS_DECODE_ALL
from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec
from tests.unit.trainers.image_sets import IndexedSamples, Pictures
from trainers.components import feeds
from trainers.data.decode import Encoded, Split, decode_on_device, decode_square
from trainers.data.images import BadSamples, ImageSet, worker_decodes
from trainers.data.steps import Batching
from trainers.data.streamed import ImageSteps, StreamedImages, streamed_images
from trainers.dist_env import DistEnv
from trainers.strategies.single import SingleDeviceStrategy

CPU = torch.device("cpu")
SIDE = 32
HALF = 0.5  # the workers decode the odd indices: worker_decodes(i, 0.5) is floor((i+1)/2) > floor(i/2)
PICTURES = Pictures(count=48, classes=48, width=(36, 60), height=(34, 56))
MicroBatches = list[tuple[torch.Tensor, torch.Tensor]]


def photos(count: int, bad: frozenset[int] = frozenset()) -> IndexedSamples:
    """PICTURES' first `count`, each labelled with its index."""
    return IndexedSamples(count, PICTURES.jpeg, bad, prefix="photo")


def job(on_bad_sample: str = "fail", augment: bool = False) -> JobSpec:
    data = {
        "dataset": "image_folder",
        "root": "unused",
        "image_size": SIDE,
        "placement": "stream",
        "on_bad_sample": on_bad_sample,
    }
    if augment:
        data["augment"] = {"random_resized_crop": {"scale": [0.5, 1.0]}, "hflip": 0.5}
    return JobSpec.model_validate(
        {"model": {"arch": "mlp"}, "data": data, "train": {"batch_size": 16, "grad_accum_steps": 2}}
    )


def streamed(spec: JobSpec, samples: IndexedSamples, share: float) -> StreamedImages:
    images = ImageSet(samples, samples.count, np.arange(samples.count), np.arange(0))
    return streamed_images(spec, images, workers_share=share)


def steps(samples: IndexedSamples, share: float, workers: int = 0, on_bad_sample: str = "fail") -> ImageSteps:
    spec = job(on_bad_sample)
    batching = Batching(per_rank_batch=8, micro_batch=4, seed=5, workers=workers, device=CPU)
    env = DistEnv(rank=0, local_rank=0, world_size=1, device=CPU)
    return ImageSteps(streamed(spec, samples, share), env, batching, BadSamples(spec.data.on_bad_sample))


def micro_batches(reader: ImageSteps, count: int) -> MicroBatches:
    return [micro for step in islice(reader.from_step(0), count) for micro in step]


def far_from_its_picture(image: torch.Tensor, label: int) -> bool:
    """More than the two decoders' rounding apart from the PIL square of its label's picture."""
    expected = decode_square(PICTURES.jpeg(label), SIDE)
    return bool((image.float() - expected.float()).abs().mean() > 6)


def test_the_workers_decode_their_share_of_the_indices_spread_evenly() -> None:
    picked = [worker_decodes(index, 5 / 16) for index in range(1600)]
    assert sum(picked) == 500 and all(sum(picked[i : i + 16]) == 5 for i in range(0, 1600, 16))
    assert not any(worker_decodes(index, GPU_DECODES_ALL) for index in range(100))
    assert all(worker_decodes(index, WORKERS_DECODE_ALL) for index in range(100))


def test_a_split_batch_is_the_cpu_paths_where_the_workers_decode_and_the_gpu_paths_elsewhere() -> None:
    samples = photos(48)
    # Two loader workers: the split batch crosses from their processes as the trainer gets it.
    split = micro_batches(steps(samples, HALF, workers=2), 6)  # an epoch: 48 // 8 steps
    cpu = micro_batches(steps(samples, WORKERS_DECODE_ALL), 6)
    gpu = micro_batches(steps(samples, GPU_DECODES_ALL), 6)
    mixed = 0
    for (x, y), (cpu_x, cpu_y), (gpu_x, gpu_y) in zip(split, cpu, gpu, strict=True):
        assert torch.equal(y, cpu_y) and torch.equal(y, gpu_y)  # the same samples in the same order
        assert x.shape == (4, 3, SIDE, SIDE) and x.dtype == torch.uint8
        on_workers = torch.tensor([worker_decodes(int(label), HALF) for label in y])
        assert torch.equal(x[on_workers], cpu_x[on_workers])
        # The device resizes its part as a batch of its own: a value at .5 may round the other way.
        assert ((x[~on_workers].int() - gpu_x[~on_workers].int()).abs() <= 1).all()
        assert (x.float() - cpu_x.float()).abs().mean() < 3  # the decoders' rounding, as the GPU tests'
        mixed += 0 < int(on_workers.sum()) < len(y)
    assert mixed > 0


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_files_on_either_side_are_replaced_and_counted_under_skip(workers: int) -> None:
    bad = frozenset({3, 8})
    assert worker_decodes(3, HALF) and not worker_decodes(8, HALF)  # one in each part
    reader = steps(photos(32, bad), HALF, workers=workers, on_bad_sample="skip")
    epoch = micro_batches(reader, 4)
    assert all(x.shape == (4, 3, SIDE, SIDE) for x, _ in epoch)
    assert not bad & {int(label) for _, y in epoch for label in y}
    placed = [(image, int(label)) for x, y in epoch for image, label in zip(x, y, strict=True)]
    assert not any(far_from_its_picture(image, label) for image, label in placed)
    assert reader.bad.count == 2


@pytest.mark.parametrize(("bad", "why"), [(3, "photo-3 cannot be read"), (8, "photo-8 cannot be decoded")])
def test_a_bad_file_on_either_side_fails_the_job_naming_it(bad: int, why: str) -> None:
    reader = steps(photos(32, frozenset({bad})), HALF)
    with pytest.raises(ValueError, match=f"data.on_bad_sample=fail: {why}"):
        micro_batches(reader, 4)


def test_a_split_whose_every_file_is_bad_takes_a_square_of_the_workers_in_their_places() -> None:
    garbage = torch.frombuffer(bytearray(b"\xff\xd8\xff" + b"garbage" * 9), dtype=torch.uint8)
    square = decode_square(PICTURES.jpeg(1), SIDE)
    batch = Split(square[None], Encoded.packed([garbage, garbage.clone()], ["x.jpg", "y.jpg"]), [1])
    decoded = decode_on_device(batch, SIDE, CPU)
    assert decoded.sources == [1, 1, 1]
    assert all(torch.equal(image, square) for image in decoded.pixels)
    assert decoded.problems[0].startswith("x.jpg cannot be decoded") and decoded.problems[1] == ""
    assert decoded.problems[2].startswith("y.jpg cannot be decoded")


def test_a_resumed_split_run_reads_exactly_the_rest_of_the_epoch_and_augments_it_alike() -> None:
    spec = job(augment=True)
    data = streamed(spec, photos(40), HALF)
    strategy = SingleDeviceStrategy(DistEnv(rank=0, local_rank=0, world_size=1, device=CPU))
    plan = resolve_plan(spec)

    def run(done: int) -> list[MicroBatches]:
        train = feeds(spec, plan, strategy, data, channels_last=False)[0]
        return list(islice(train.from_step(done), 8 - done))

    whole, resumed = run(0), run(3)  # 2 steps an epoch of 40 // 16: resumed mid-way through the second
    assert len(resumed) == 5
    for again, first in zip(resumed, whole[3:], strict=True):
        for (x, y), (first_x, first_y) in zip(again, first, strict=True):
            assert torch.equal(y, first_y) and torch.equal(x, first_x)

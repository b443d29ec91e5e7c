"""data.decode=gpu, and auto's split, on a real GPU: nvJPEG decodes on a stream of its own, with no
device-wide sync, and neither overwrites what the training stream still reads nor lets that stream read
pixels before they are written; the pixels equal those of a decode on an idle GPU and are close to the CPU
path's.

Each test queues work behind a long kernel on the training stream (torch.cuda._sleep), so anything the
decode writes too early lands before that work reads. Skipped without CUDA; run on the device machine:
    python -m pytest -q tests/gpu/test_gpu_decode.py
"""

from __future__ import annotations

import io
from itertools import islice

import numpy as np
import pytest
import torch
from PIL import Image

from jobspec.decode_plan import GPU_DECODES_ALL
from jobspec.spec import JobSpec
from tests.unit.trainers.image_sets import IndexedSamples, Pictures
from trainers.data.decode import Encoded, Split, decode_on_device, decode_square
from trainers.data.images import BadSamples, ImageSet, worker_decodes
from trainers.data.steps import Batching
from trainers.data.streamed import ImageSteps, streamed_images
from trainers.dist_env import DistEnv

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

SIDE = 96
# About a quarter of a second of the training stream's time: far longer than a batch's decode.
BUSY_CYCLES = 500_000_000
PICTURES = Pictures(count=96, classes=4, width=(100, 180), height=(90, 170))


def cuda() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


def jpeg(index: int) -> bytes:
    return PICTURES.jpeg(index)


def packed(indices: list[int]) -> Encoded:
    files = [torch.frombuffer(bytearray(jpeg(i)), dtype=torch.uint8) for i in indices]
    return Encoded.packed(files, [f"picture-{i}" for i in indices])


def on_idle_gpu(batch: Encoded | Split) -> torch.Tensor:
    """The batch's pixels decoded with nothing else queued, as data.decode=gpu did with a device sync."""
    torch.cuda.synchronize()
    pixels = decode_on_device(batch, SIDE, cuda()).received().pixels.cpu()
    torch.cuda.synchronize()
    return pixels


def decoded_bytes(index: int) -> int:
    with Image.open(io.BytesIO(jpeg(index))) as image:
        width, height = image.size
    return 3 * width * height


def test_the_decode_never_writes_blocks_the_training_stream_still_reads() -> None:
    """pytorch/vision#9606: blocks the size of the decoded images, freed while reads of them wait behind a
    long kernel, are what the allocator hands the decoder first if it allocates on the training stream."""
    indices = list(range(32))
    expected = on_idle_gpu(packed(indices))
    sizes = [decoded_bytes(i) for i in indices]
    blocks = [torch.full((size,), 7, dtype=torch.uint8, device=cuda()) for size in sizes]
    torch.cuda._sleep(BUSY_CYCLES)
    sums = [block.sum(dtype=torch.int64) for block in blocks]
    del blocks
    decoded = decode_on_device(packed(indices), SIDE, cuda()).received()
    torch.cuda.synchronize()
    assert [int(total) for total in sums] == [7 * size for size in sizes]
    assert torch.equal(decoded.pixels.cpu(), expected)


def test_pixels_the_training_stream_still_reads_are_not_reused_by_the_next_decode() -> None:
    first = decode_on_device(packed(list(range(32))), SIDE, cuda()).received()
    expected = int(first.pixels.sum(dtype=torch.int64))
    torch.cuda._sleep(BUSY_CYCLES)
    total = first.pixels.sum(dtype=torch.int64)
    del first
    decode_on_device(packed(list(range(32, 64))), SIDE, cuda()).received()
    torch.cuda.synchronize()
    assert int(total) == expected


def test_nvjpeg_pixels_are_close_to_the_cpu_path() -> None:
    """The same squares as PIL in the loader workers, within the two JPEG decoders' rounding."""
    indices = list(range(16))
    gpu = on_idle_gpu(packed(indices)).float()
    cpu = torch.stack([decode_square(jpeg(i), SIDE) for i in indices]).float()
    assert (gpu - cpu).abs().mean() < 3


def labelled(count: int) -> IndexedSamples:
    """PICTURES' first `count`, each labelled with its index: a batch's labels say which files it holds."""
    return IndexedSamples(count, jpeg, prefix="picture")


def stepped(share: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Through ImageSteps, as the trainer reads, with `share` of each batch decoded by the loader workers:
    the next batch decodes in a thread while the training stream is busy; each step's pixels are read on
    the training stream the moment they are handed over."""
    samples = labelled(64)
    data = {"dataset": "image_folder", "root": "unused", "image_size": SIDE}
    spec = JobSpec.model_validate({"model": {"arch": "mlp"}, "data": data, "train": {"batch_size": 16}})
    images = streamed_images(
        spec, ImageSet(samples, samples.count, np.arange(samples.count), np.arange(0)), workers_share=share
    )
    batching = Batching(per_rank_batch=16, micro_batch=16, seed=3, workers=0, device=cuda())
    env = DistEnv(rank=0, local_rank=0, world_size=1, device=cuda())
    steps = ImageSteps(images, env, batching, BadSamples(spec.data.on_bad_sample))
    seen = []
    for step in islice(steps.from_step(0), 6):  # an epoch is 4 steps: past its end and into the next
        for pixels, labels in step:
            seen.append((pixels.clone(), labels.clone()))
        torch.cuda._sleep(BUSY_CYCLES // 8)
    torch.cuda.synchronize()
    return seen


def test_training_steps_decoded_a_batch_ahead_equal_an_idle_decode_of_their_files() -> None:
    for pixels, labels in stepped(GPU_DECODES_ALL):
        assert torch.equal(pixels.cpu(), on_idle_gpu(packed(labels.tolist())))


def test_split_steps_equal_an_idle_decode_of_their_two_parts() -> None:
    """data.decode=auto's split: the workers' squares (pinned, copied on the decode stream) and the GPU's
    part, each in its place."""
    share = 0.5
    for pixels, labels in stepped(share):
        files = labels.tolist()
        decoded_at = [i for i, file in enumerate(files) if worker_decodes(file, share)]
        squares = torch.stack([decode_square(jpeg(files[i]), SIDE) for i in decoded_at])
        rest = packed([file for i, file in enumerate(files) if i not in decoded_at])
        assert 0 < len(decoded_at) < len(files)
        assert torch.equal(pixels.cpu(), on_idle_gpu(Split(squares, rest, decoded_at)))

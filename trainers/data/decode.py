"""Encoded images to RGB uint8 squares of the load side (data.load_size): the shorter side resized to it and
the middle square kept, which is all the CPU does before batching; the device crops and resizes the rest
(trainers/data/augment.py).

With data.decode=cpu each loader worker decodes with PIL; with data.decode=gpu the workers only read the
bytes and the rank's GPU decodes a batch at a time (nvJPEG through torchvision), on a stream of its own
that the training stream waits for through an event: never a device-wide sync. data.decode=auto may split
each batch between them (Split): the GPU decodes the bytes and puts the workers' squares in their places.
"""

from __future__ import annotations

import functools
import io
import threading
import warnings
from dataclasses import dataclass, replace

import numpy as np
import torch

JPEG_START = b"\xff\xd8\xff"
# A batch of images of many sizes is one strided nested tensor (its ragged dimensions are two, which the
# jagged layout cannot hold); the notice that this layout is a prototype is no concern of the job's.
warnings.filterwarnings("ignore", "The PyTorch API of nested tensors is in prototype stage", UserWarning)


def middle_square(width: int, height: int) -> tuple[int, int, int, int]:
    """The box (left, top, right, bottom) of the largest square in the middle of an image."""
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


def decode_square(raw: bytes, side: int) -> torch.Tensor:
    """3 x side x side uint8; raises (OSError, ValueError, PIL's own) on bytes that are no whole image."""
    from PIL import Image

    with Image.open(io.BytesIO(raw)) as image:
        # A JPEG decodes at 1/2, 1/4 or 1/8 scale when that still covers side x side: far less work.
        image.draft("RGB", (side, side))
        rgb = image.convert("RGB")
    square = rgb.resize((side, side), Image.Resampling.BILINEAR, box=middle_square(*rgb.size))
    return torch.from_numpy(np.asarray(square, dtype=np.uint8).copy()).permute(2, 0, 1)


def is_jpeg(raw: bytes) -> bool:
    return raw.startswith(JPEG_START)


@dataclass(frozen=True)
class Encoded:
    """A batch of JPEG files' bytes, decoded on the GPU. End to end in one uint8 tensor: one block of shared
    memory from a loader worker, where a tensor per file would pass a file descriptor each. Not a tensor
    itself, so it stays on the host when the rest of the batch moves: nvJPEG reads from host memory."""

    data: torch.Tensor
    lengths: list[int]
    names: list[str]  # as messages show them

    @classmethod
    def packed(cls, files: list[torch.Tensor], names: list[str]) -> Encoded:
        return cls(torch.cat(files), [len(file) for file in files], names)

    def files(self) -> list[torch.Tensor]:
        return list(self.data.split(self.lengths))

    def pin_memory(self) -> Encoded:
        """The DataLoader's pinning thread calls this: nvJPEG's copies of the files from pinned memory go at
        the link's speed, without a staging copy on the decoding thread."""
        return replace(self, data=self.data.pin_memory())


@dataclass(frozen=True)
class Split:
    """A batch decoded partly by the loader workers and partly on the GPU (data.decode=auto's split): the
    workers' squares, the rest's bytes, and where the squares stand in the batch (the bytes' files fill the
    other places, in order). Never all of one kind: such a batch is a plain one of that kind."""

    pixels: torch.Tensor  # k x 3 x side x side uint8
    encoded: Encoded
    decoded_at: list[int]  # ascending

    def pin_memory(self) -> Split:
        return replace(self, pixels=self.pixels.pin_memory(), encoded=self.encoded.pin_memory())


def _resize_weights(sides: torch.Tensor, offsets: torch.Tensor, side: int, length: int) -> torch.Tensor:
    """N x side x length: for each image's middle square (sides[n] pixels from offsets[n] on, in a padded
    axis of `length`), the weights of the axis' pixels in each of `side` output pixels. Antialiased bilinear,
    as torch's and PIL's resize: a triangle as wide as the scale when shrinking, renormalised where it passes
    the square's edge, zero outside it."""
    scale = (sides / side).view(-1, 1, 1)
    centre = (torch.arange(side, device=sides.device) + 0.5).view(1, -1, 1) * scale
    source = (torch.arange(length, device=sides.device) + 0.5).view(1, 1, -1) - offsets.view(-1, 1, 1)
    weights = (1 - ((source - centre) / scale.clamp(min=1.0)).abs()).clamp(min=0)
    weights = weights * ((source > 0) & (source < sides.view(-1, 1, 1)))
    return weights / weights.sum(dim=-1, keepdim=True)


def squares(images: list[torch.Tensor], side: int) -> torch.Tensor:
    """N x 3 x side x side uint8: each 3 x H x W image's middle square resized to side x side, the batch in a
    few whole-batch ops. Per image, even a slice or a copy is a call that hands the interpreter's lock back
    and forth with the training thread: hundreds per batch cost that thread more than the resize itself."""
    shapes = [image.shape[-2:] for image in images]
    boxes = [middle_square(width, height) for height, width in shapes]
    count, device = len(images), images[0].device
    height, width = max(h for h, _ in shapes), max(w for _, w in shapes)
    # First, while the decode stream is idle: a list's copy to the device waits for the current stream.
    left, top, right, _ = torch.tensor(boxes, dtype=torch.float32, device=device).unbind(1)
    rows = _resize_weights(right - left, top, side, height)
    columns = _resize_weights(right - left, left, side, width)
    padded = torch.nested.nested_tensor(images, dtype=torch.float32).to_padded_tensor(0.0)
    wide = torch.bmm(padded.view(count, 3 * height, width), columns.transpose(1, 2))
    tall = wide.view(count, 3, height, side).transpose(1, 2).reshape(count, height, 3 * side)
    resized = torch.bmm(rows, tall).view(count, side, 3, side).permute(0, 2, 1, 3)
    return resized.round_().clamp_(0, 255).to(torch.uint8, memory_format=torch.contiguous_format)


@dataclass(frozen=True)
class OnDevice:
    pixels: torch.Tensor  # N x 3 x side x side uint8
    sources: list[int]  # the file of the batch each image is: itself, or a good one in a bad one's place
    problems: list[str]  # per file, what failed ("": nothing)
    done: torch.cuda.Event | None = None  # on a GPU: recorded on the decode stream after its last write

    def received(self) -> OnDevice:
        """Itself, its pixels safe to read on the caller's current stream (from any thread): that stream
        waits for the decode stream's writes, and the allocator gives the block back to the decode stream
        only once what the caller queued has read it."""
        if self.done is not None:
            stream = torch.cuda.current_stream(self.pixels.device)
            stream.wait_event(self.done)
            self.pixels.record_stream(stream)
        return self


@dataclass(frozen=True)
class DecodeStream:
    """A GPU's stream for decoding, high priority so its short kernels pass the training step's, and the lock
    that keeps the training thread's and a held-out batch's decodes from interleaving on it."""

    stream: torch.cuda.Stream
    lock: threading.Lock


@functools.cache
def decode_stream(device: torch.device) -> DecodeStream:
    return DecodeStream(torch.cuda.Stream(device, priority=-1), threading.Lock())


def decode_on_device(batch: Encoded | Split, side: int, device: torch.device) -> OnDevice:
    """The batch decoded on `device` (nvJPEG on a GPU), queued on the device's decode stream without waiting
    for the training stream: take the result with `received()`. A file that does not decode is
    replaced by the batch's previous (or first) good one, so the batch keeps its size; its label must follow
    (`sources`)."""
    if device.type != "cuda":
        return _any_decoded(batch, side, device)
    line = decode_stream(device)
    with line.lock, torch.cuda.stream(line.stream):
        # torchvision's CUDA decoder allocates its outputs on the current stream, this one, and nvJPEG's
        # hardware decoder writes them when called, after nothing queued on any stream (pytorch/vision#9606,
        # meta-pytorch/torchcodec#1634). A block freed here is handed out again at once, so nothing queued
        # here may still read one: this stream idle, never the whole device. The training stream's blocks
        # are never this stream's to hand out, and the outputs are whole when the call returns.
        line.stream.synchronize()
        decoded = _any_decoded(batch, side, device)
        done = torch.cuda.Event()
        done.record(line.stream)
    return replace(decoded, done=done)


def _any_decoded(batch: Encoded | Split, side: int, device: torch.device) -> OnDevice:
    return _split_decoded(batch, side, device) if isinstance(batch, Split) else _decoded(batch, side, device)


def _jpegs(batch: Encoded, device: torch.device) -> tuple[list[torch.Tensor | None], list[str]]:
    """Each file decoded to 3 x H x W (None where it does not decode), and per file what failed."""
    from torchvision.io import ImageReadMode, decode_jpeg

    try:
        decoded: list[torch.Tensor | None] = list(
            decode_jpeg(batch.files(), mode=ImageReadMode.RGB, device=device)
        )
        return decoded, [""] * len(batch.lengths)
    except RuntimeError:  # one bad file fails the whole call: find it one file at a time
        decoded, problems = [], []
        for raw, name in zip(batch.files(), batch.names, strict=True):
            try:
                decoded.append(decode_jpeg(raw, mode=ImageReadMode.RGB, device=device))
                problems.append("")
            except RuntimeError as exc:
                decoded.append(None)
                # torchvision's first line is "decode_jpeg, <source file>:<line>, <what is wrong>".
                problems.append(f"{name} cannot be decoded ({str(exc).splitlines()[0].rsplit(', ', 1)[-1]})")
        return decoded, problems


def _sources(good: list[bool]) -> list[int]:
    """Per image of a batch, the one in its place: itself, or a bad one's previous (or first) good one."""
    sources, source = [], good.index(True)
    for i, ok in enumerate(good):
        source = i if ok else source
        sources.append(source)
    return sources


def _decoded(batch: Encoded, side: int, device: torch.device) -> OnDevice:
    decoded, problems = _jpegs(batch, device)
    good = {i: image for i, image in enumerate(decoded) if image is not None}
    if not good:
        raise ValueError(
            f"data.decode=gpu: none of a batch of {len(decoded)} JPEGs decodes ({problems[0]}); use "
            "data.decode cpu, which reads what the GPU's decoder cannot"
        )
    sources = _sources([image is not None for image in decoded])
    return OnDevice(squares([good[i] for i in sources], side), sources, problems)


def _split_decoded(batch: Split, side: int, device: torch.device) -> OnDevice:
    """The bytes decoded and resized as a batch of their own, then each image, the workers' squares
    included, put in its place: one gather, which also puts a good image in a bad one's."""
    decoded, decode_problems = _jpegs(batch.encoded, device)
    size = len(batch.decoded_at) + len(decoded)
    by_workers = set(batch.decoded_at)
    encoded_at = [position for position in range(size) if position not in by_workers]
    good, problems = [True] * size, [""] * size
    for position, image, problem in zip(encoded_at, decoded, decode_problems, strict=True):
        good[position], problems[position] = image is not None, problem
    resized_at = [position for position in encoded_at if good[position]]
    # The rows of the workers' squares, then of the resized images, for each place's image.
    row = {position: i for i, position in enumerate(batch.decoded_at + resized_at)}
    sources = _sources(good)
    # First, while the decode stream is idle: a list's copy to the device waits for the current stream.
    rows = torch.tensor([row[source] for source in sources], device=device)
    resized = [squares([image for image in decoded if image is not None], side)] if resized_at else []
    pixels = torch.cat([batch.pixels.to(device, non_blocking=True), *resized])
    return OnDevice(pixels.index_select(0, rows), sources, problems)

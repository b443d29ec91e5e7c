"""Encoded images to RGB uint8 squares of the load side (data.load_size): the shorter side resized to it and
the middle square kept, which is all the CPU does before batching; the device crops and resizes the rest
(trainers/data/augment.py).

With data.decode=cpu each loader worker decodes with PIL; with data.decode=gpu the workers only read the
bytes and the rank's GPU decodes a batch at a time (nvJPEG through torchvision).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import torch

JPEG_START = b"\xff\xd8\xff"


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


def _square_on_device(image: torch.Tensor, side: int) -> torch.Tensor:
    from torchvision.transforms.v2 import functional as TF

    image = TF.resize(image, [side], antialias=True)  # the shorter side to `side`
    return TF.center_crop(image, [side, side])


@dataclass(frozen=True)
class OnDevice:
    pixels: torch.Tensor  # N x 3 x side x side uint8
    sources: list[int]  # the file of the batch each image is: itself, or a good one in a bad one's place
    problems: list[str]  # per file, what failed ("": nothing)


def decode_on_device(batch: Encoded, side: int, device: torch.device) -> OnDevice:
    """The batch decoded on `device` (nvJPEG on a GPU). A file that does not decode is replaced by the
    batch's previous (or first) good one, so the batch keeps its size; its label must follow (`sources`)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    if device.type == "cuda":
        # torchvision's CUDA decoder allocates its outputs on the caller's stream but writes them from a
        # stream of its own that does not wait for the caller's (pytorch/vision#9606): a block the
        # allocator recycled could still be read by queued kernels, and training went NaN within steps.
        # Nothing may be queued while it decodes.
        torch.cuda.synchronize(device)
    try:
        decoded: list[torch.Tensor | None] = list(
            decode_jpeg(batch.files(), mode=ImageReadMode.RGB, device=device)
        )
        problems = [""] * len(batch.lengths)
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
    good = {i: image for i, image in enumerate(decoded) if image is not None}
    if not good:
        raise ValueError(
            f"data.decode=gpu: none of a batch of {len(decoded)} JPEGs decodes ({problems[0]}); use "
            "data.decode cpu, which reads what the GPU's decoder cannot"
        )
    sources, source = [], next(iter(good))
    for i in range(len(decoded)):
        source = i if i in good else source
        sources.append(source)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # its writes done before this stream reads them
    squares = [_square_on_device(good[i], side) for i in sources]
    return OnDevice(torch.stack(squares), sources, problems)

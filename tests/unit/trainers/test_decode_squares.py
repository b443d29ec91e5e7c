"""data.decode=gpu's resize, trainers/data/decode.py's `squares`: a batch of images of many sizes, each
one's middle square resized in the same two batched products, as torch's antialiased resize would."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainers.data.decode import middle_square, squares

SIDE = 16


def test_each_middle_square_is_resized_as_torch_antialiased_resize_does_it() -> None:
    generator = torch.Generator().manual_seed(0)
    shapes = [(37, 50), (10, 12), (160, 150), (16, 16), (90, 31)]  # shrunk, enlarged, kept; wide and tall
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator) for h, w in shapes]
    resized = squares(images, SIDE)
    assert resized.shape == (len(images), 3, SIDE, SIDE) and resized.dtype == torch.uint8
    for image, square in zip(images, resized, strict=True):
        left, top, right, bottom = middle_square(image.shape[2], image.shape[1])
        crop = image[None, :, top:bottom, left:right].float()
        expected = F.interpolate(crop, size=(SIDE, SIDE), mode="bilinear", antialias=True).round()[0]
        # The same weights summed in another order: a value at .5 may round the other way.
        assert (square.float() - expected).abs().max() <= 1
        assert (square.float() != expected).float().mean() < 0.01

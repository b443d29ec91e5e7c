"""The model registry: architecture name -> builder and what it needs of its input."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from trainers.models.embedding_bag import build_embedding_bag
from trainers.models.mlp import build_mlp
from trainers.models.small_cnn import build_small_cnn
from trainers.models.vision import build_alexnet, build_resnet18, build_resnet50, build_vgg11

Builder = Callable[..., nn.Module]


@dataclass(frozen=True)
class Arch:
    build: Builder  # (in_channels, num_classes, image_size, **kwargs) -> module
    min_image_size: int  # smaller inputs shrink to nothing inside the network
    rgb: bool  # torchvision stems take exactly 3 channels
    convolutional: bool  # 4-D activations: channels_last applies
    tokens: bool = False  # takes int64 bags of token ids: built from data.vocab_size, not an image shape

    def in_channels(self, data_channels: int) -> int:
        """Grayscale is expanded to 3 channels on the device for RGB models; other mismatches fail."""
        if not self.rgb or data_channels == 3:
            return data_channels
        if data_channels == 1:
            return 3
        raise ValueError(
            f"this model takes 3-channel images but the data has {data_channels}; use data.channels 1 or 3"
        )

    def image_size(self, requested: int | None, native: int) -> int:
        if requested is None:
            return max(native, self.min_image_size)
        if requested < self.min_image_size:
            raise ValueError(
                f"data.image_size={requested} is too small for this model; use at least {self.min_image_size}"
            )
        return requested


ARCHS: dict[str, Arch] = {
    "mlp": Arch(build_mlp, min_image_size=1, rgb=False, convolutional=False),
    "small_cnn": Arch(build_small_cnn, min_image_size=4, rgb=False, convolutional=True),
    "alexnet": Arch(build_alexnet, min_image_size=63, rgb=True, convolutional=True),
    "resnet18": Arch(build_resnet18, min_image_size=32, rgb=True, convolutional=True),
    "resnet50": Arch(build_resnet50, min_image_size=32, rgb=True, convolutional=True),
    # Five 2x max-pools before an adaptive pool: 32 px reach the pool as 1x1 (the pool then copies it 7x7).
    "vgg11": Arch(build_vgg11, min_image_size=32, rgb=True, convolutional=True),
    "embedding_bag": Arch(build_embedding_bag, min_image_size=1, rgb=False, convolutional=False, tokens=True),
}


def get_arch(name: str) -> Arch:
    if name not in ARCHS:
        raise ValueError(f"unknown model.arch {name!r}; choose one of {', '.join(ARCHS)}")
    return ARCHS[name]


def build_model(
    arch: str,
    kwargs: dict[str, int | float],
    in_channels: int,
    num_classes: int,
    image_size: int,
    vocab_size: int | None = None,
) -> nn.Module:
    """kwargs were allow-listed by the spec (MODEL_KWARGS), so passing them on is safe."""
    chosen = get_arch(arch)
    if chosen.tokens:
        if vocab_size is None:
            raise ValueError(f"model.arch {arch} embeds token ids; it needs data.vocab_size")
        return chosen.build(vocab_size, num_classes, **kwargs)
    return chosen.build(in_channels, num_classes, image_size, **kwargs)

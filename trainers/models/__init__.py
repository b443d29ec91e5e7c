"""The model builders, keyed by the catalogue's Arch. What the planner and the spec know of each model is its
ArchInfo (jobspec/catalog/archs.py); this module only makes modules.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from jobspec.catalog.archs import Arch, ArchInfo, Kwargs, arch_info
from jobspec.problems import SpecError
from trainers.models.embedding_bag import build_embedding_bag
from trainers.models.gpt import build_gpt
from trainers.models.mlp import build_mlp
from trainers.models.small_cnn import build_small_cnn
from trainers.models.vision import build_alexnet, build_resnet18, build_resnet50, build_vgg11

# Image models: (in_channels, num_classes, image_size, **kwargs); token models: (vocab_size, num_classes,
# **kwargs). Every kwarg comes from the catalogue, defaults filled in.
Builder = Callable[..., nn.Module]

BUILDERS: dict[Arch, Builder] = {
    Arch.MLP: build_mlp,
    Arch.SMALL_CNN: build_small_cnn,
    Arch.ALEXNET: build_alexnet,
    Arch.RESNET18: build_resnet18,
    Arch.RESNET50: build_resnet50,
    Arch.VGG11: build_vgg11,
    Arch.EMBEDDING_BAG: build_embedding_bag,
    Arch.GPT: build_gpt,
}


def get_arch(name: str) -> ArchInfo:
    """What the loop shapes batches by: input size, channels, channels_last, tokens or images."""
    return arch_info(name)


def build_model(
    arch: str,
    kwargs: Kwargs,
    in_channels: int,
    num_classes: int,
    image_size: int,
    vocab_size: int | None = None,
) -> nn.Module:
    """kwargs are checked against the catalogue here too, so no path passes others into a constructor."""
    info = arch_info(arch)
    problems = info.kwarg_problems(arch, kwargs)
    if problems:
        raise SpecError(problems)
    build = BUILDERS[Arch(arch)]
    if info.tokens:
        if vocab_size is None:
            raise ValueError(f"model.arch {arch} embeds token ids; it needs data.vocab_size")
        return build(vocab_size, num_classes, **info.complete(kwargs))
    return build(in_channels, num_classes, image_size, **info.complete(kwargs))

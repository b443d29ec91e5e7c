"""Every registered architecture builds from scratch and maps a small batch to class logits."""

from __future__ import annotations

import pytest
import torch

from jobspec.catalog.archs import Arch
from jobspec.problems import SpecError
from trainers.models import BUILDERS, build_model, get_arch


def test_registry_covers_every_arch_the_spec_accepts() -> None:
    # hf_causal_lm is read from model.path, not built from kwargs (trainers/models/hf.py).
    assert set(BUILDERS) == set(Arch) - {Arch.HF_CAUSAL_LM}


def test_builders_take_the_catalogues_defaults_and_refuse_other_kwargs() -> None:
    model = build_model("mlp", {"hidden": 16}, in_channels=1, num_classes=10, image_size=8)
    assert len(model) == 6  # Flatten, (Linear, ReLU) x the catalogue's default depth of 2, Linear
    with pytest.raises(SpecError) as refused:
        build_model("mlp", {"width": 16, "depth": 99}, in_channels=1, num_classes=10, image_size=8)
    assert [p.field for p in refused.value.problems] == ["model.kwargs.width", "model.kwargs.depth"]


@pytest.mark.parametrize(
    ("arch", "kwargs", "data_channels"),
    [
        ("mlp", {"hidden": 16, "depth": 3}, 1),
        ("small_cnn", {"channels": 4}, 3),
        ("alexnet", {"dropout": 0.2}, 1),
        ("resnet18", {}, 1),
        ("resnet50", {}, 3),
    ],
)
def test_forward_gives_logits_per_class(
    arch: str, kwargs: dict[str, int | float], data_channels: int
) -> None:
    spec = get_arch(arch)
    size = spec.image_size(None, native=8)
    channels = spec.in_channels(data_channels)
    model = build_model(arch, kwargs, channels, num_classes=7, image_size=size).eval()
    with torch.no_grad():
        logits = model(torch.randn(2, channels, size, size))
    assert logits.shape == (2, 7)


def test_mlp_depth_sets_the_hidden_layers() -> None:
    model = build_model("mlp", {"hidden": 16, "depth": 3}, in_channels=1, num_classes=10, image_size=8)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(64, 16), (16, 16), (16, 16), (16, 10)]


def test_small_cnn_has_batchnorm_for_sync_batchnorm_to_convert() -> None:
    model = build_model("small_cnn", {}, in_channels=3, num_classes=10, image_size=32)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


def test_default_image_size_is_the_native_size_raised_to_the_model_minimum() -> None:
    assert get_arch("mlp").image_size(None, native=8) == 8
    assert get_arch("resnet18").image_size(None, native=8) == 32
    assert get_arch("alexnet").image_size(None, native=32) == 63
    assert get_arch("small_cnn").image_size(48, native=32) == 48


def test_too_small_image_size_names_the_minimum() -> None:
    with pytest.raises(ValueError, match="at least 63"):
        get_arch("alexnet").image_size(32, native=32)


def test_rgb_models_take_grayscale_as_three_channels_and_refuse_others() -> None:
    assert get_arch("resnet18").in_channels(1) == 3
    assert get_arch("mlp").in_channels(1) == 1
    with pytest.raises(ValueError, match=r"data\.channels"):
        get_arch("resnet50").in_channels(4)

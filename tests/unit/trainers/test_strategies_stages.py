"""Stage split points: the catalogue's module names match the real models' stage units, defaults fall where
documented, and a model cut into SequentialStages computes exactly what the whole model does."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from jobspec.catalog.archs import ARCHS, Arch
from jobspec.problems import SpecError
from jobspec.stages import default_split_at, split_at_problem, stage_groups
from trainers.models import build_model
from trainers.placement import unit_names
from trainers.strategies.pipeline import SequentialStage


def build(arch: str, **kwargs: int | float) -> nn.Module:
    if ARCHS[arch].tokens:
        return build_model(arch, dict(kwargs), 1, 10, 8, vocab_size=50)
    return build_model(arch, dict(kwargs), 3, 10, 64)


def names_of(arch: Arch) -> tuple[str, ...]:
    return ARCHS[arch].module_names({})


def test_the_catalogue_covers_every_architecture() -> None:
    assert set(ARCHS) == set(Arch)


# hf_causal_lm is read from model.path: tests/unit/trainers/test_hf_models.py checks its one child.
@pytest.mark.parametrize("arch", sorted(set(Arch) - {Arch.HF_CAUSAL_LM}))
def test_module_names_are_the_models_stage_units(arch: Arch) -> None:
    # Built on the meta device: the names need the modules, not vgg11's or gpt's ~100M initialised weights.
    with torch.device("meta"):
        model = build(arch)
    assert names_of(arch) == tuple(unit_names(model))


def test_mlp_module_names_follow_its_depth() -> None:
    names = tuple(name for name, _ in build("mlp", depth=3).named_children())
    assert ARCHS[Arch.MLP].module_names({"depth": 3}) == names


def test_gpt_units_are_its_blocks_between_the_embeddings_and_the_head() -> None:
    names = unit_names(build("gpt", n_layer=3, n_head=2, n_embd=16))
    assert names == ["wte", "wpe", "drop", "blocks.0", "blocks.1", "blocks.2", "ln_f", "lm_head"]
    assert ARCHS[Arch.GPT].module_names({"n_layer": 3}) == tuple(names)
    # Every stage holds a block: the embeddings join the first, ln_f and the head the last.
    assert ARCHS[Arch.GPT].split_points(names) == ("blocks.1", "blocks.2")
    assert default_split_at("gpt", names, 3) == ["blocks.1", "blocks.2"]
    with pytest.raises(ValueError, match="at most 3 stages"):
        default_split_at("gpt", names, 4)


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        ("resnet18", ["layer3"]),
        ("resnet50", ["layer3"]),
        ("alexnet", ["classifier"]),
        ("vgg11", ["classifier"]),
        ("mlp", ["3"]),
        ("small_cnn", ["4"]),
        ("embedding_bag", ["classifier"]),
        ("gpt", ["blocks.6"]),
    ],
)
def test_two_stages_split_at_the_natural_point(arch: Arch, expected: list[str]) -> None:
    assert default_split_at(arch, names_of(arch), 2) == expected


def test_more_stages_spread_over_the_candidates_and_stop_at_their_count() -> None:
    names = names_of(Arch.RESNET50)
    assert default_split_at("resnet50", names, 3) == ["layer2", "layer4"]
    assert default_split_at("resnet50", names, 6) == ["layer1", "layer2", "layer3", "layer4", "avgpool"]
    assert ARCHS[Arch.RESNET50].max_stages(names) == 6
    with pytest.raises(ValueError, match="at most 6 stages"):
        default_split_at("resnet50", names, 7)
    mlp = names_of(Arch.MLP)
    for stages in range(2, 7):
        split = default_split_at("mlp", mlp, stages)
        assert len(set(split)) == stages - 1 and split_at_problem(mlp, split) is None


def test_split_points_are_checked_and_cut_in_order() -> None:
    names = ("a", "b", "c", "d")
    assert stage_groups(names, ["c"]) == [["a", "b"], ["c", "d"]]
    assert stage_groups(names, ["b", "d"]) == [["a"], ["b", "c"], ["d"]]
    assert "does not have" in str(split_at_problem(names, ["x"]))
    assert "first stage would be empty" in str(split_at_problem(names, ["a"]))
    assert "model's order" in str(split_at_problem(names, ["c", "b"]))
    assert "model's order" in str(split_at_problem(names, ["b", "b"]))
    assert split_at_problem(names, ["b", "d"]) is None
    with pytest.raises(SpecError, match=r"parallel\.split_at") as refused:
        stage_groups(names, ["x"])
    assert [problem.field for problem in refused.value.problems] == ["parallel.split_at"]


@pytest.mark.parametrize("arch", ["mlp", "small_cnn", "alexnet", "resnet18", "vgg11"])
def test_sequential_stages_compute_what_the_model_computes(arch: str) -> None:
    torch.manual_seed(0)
    model = build(arch).eval()
    names = [name for name, _ in model.named_children()]
    groups = stage_groups(names, default_split_at(arch, names, 3 if arch == "resnet18" else 2))
    stages = [SequentialStage(model, group) for group in groups]
    x = torch.randn(2, 3, 64, 64)
    h = x
    with torch.no_grad():
        for stage in stages:
            h = stage(h)
        torch.testing.assert_close(h, model(x), rtol=0, atol=0)
    keys = [key for stage in stages for key in stage.state_dict()]
    assert keys == list(model.state_dict())


def test_gpt_stages_compute_what_the_model_computes_under_its_own_keys() -> None:
    torch.manual_seed(0)
    model = build("gpt", n_layer=4, n_head=2, n_embd=16, block_size=8, tie_embeddings=0).eval()
    stages = [SequentialStage(model, group) for group in stage_groups(unit_names(model), ["blocks.2"])]
    ids = torch.randint(0, 50, (2, 8))
    h = ids
    with torch.no_grad():
        for stage in stages:
            h = stage(h)
        torch.testing.assert_close(h, model(ids), rtol=0, atol=0)
    first, second = (list(stage.state_dict()) for stage in stages)
    assert first[-1].startswith("blocks.1.") and second[0].startswith("blocks.2.")
    assert [key for stage in stages for key in stage.state_dict()] == list(model.state_dict())

"""The built-in architectures: one ArchInfo per Arch, everything the spec, the planner, the stage splitter and
the docs know of a model. Adding an architecture adds its entry here and its builder in
trainers/models/__init__.py; unit tests check each entry against the model its builder makes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from jobspec.catalog.datasets import InputKind
from jobspec.problems import Problem, refuse

Kwargs = Mapping[str, float]  # model.kwargs: JSON numbers (ints stay ints)
ModuleNames = Callable[[Kwargs], tuple[str, ...]]  # kwargs with defaults filled in -> top-level modules
ParamCount = Callable[[Kwargs, int], float]  # kwargs with defaults filled in, data.vocab_size -> parameters


class Arch(StrEnum):
    MLP = "mlp"
    SMALL_CNN = "small_cnn"
    ALEXNET = "alexnet"
    RESNET18 = "resnet18"
    RESNET50 = "resnet50"
    VGG11 = "vgg11"
    EMBEDDING_BAG = "embedding_bag"
    GPT = "gpt"
    HF_CAUSAL_LM = "hf_causal_lm"


@dataclass(frozen=True)
class Kwarg:
    """A constructor argument a spec may set. Nothing else reaches a constructor."""

    kind: type[int] | type[float]
    low: float
    high: float
    default: float

    def problem(self, field: str, value: float) -> Problem | None:
        if self.kind is int and not isinstance(value, int):
            return Problem(field, f"{field}={value} must be an integer", f"use a whole number {self.bounds}")
        if not self.low <= value <= self.high:
            return Problem(field, f"{field}={value} is out of range", f"use {self.bounds}")
        return None

    @property
    def bounds(self) -> str:
        return f"{self.low:g}..{self.high:g}"


@dataclass(frozen=True)
class ArchInfo:
    input: InputKind
    kwargs: Mapping[str, Kwarg]
    modules: ModuleNames  # stage units in forward order (trainers/placement.py), which split_at names
    params: ParamCount  # rough, enough for strategy auto to tell a model that replicates well
    min_image_size: int = 1  # smaller inputs shrink to nothing inside the network
    rgb: bool = False  # the stem takes exactly 3 channels
    convolutional: bool = False  # 4-D activations: channels_last applies
    # Where a default stage may begin; None: any module. A ModuleList named here stands for its items but the
    # first, so that every stage holds at least one of its blocks.
    split_candidates: tuple[str, ...] | None = None
    sparse: bool = False  # an embedding table with sparse gradients, which only plain SGD takes
    # The output head shares the input embedding's weight (model.kwargs.tie_embeddings, default 1), which
    # one device must hold: a model spread over devices gets a head of its own unless the spec ties it.
    tied: bool = False

    @property
    def language_model(self) -> bool:
        """Predicts every next token of its input: trained with next-token cross entropy."""
        return self.input is InputKind.TOKENS

    def with_context(self, kwargs: Kwargs, block_size: int | None) -> Kwargs:
        """A model with a context (model.kwargs.block_size) takes the data's windows by default."""
        if "block_size" in self.kwargs and "block_size" not in kwargs and block_size is not None:
            return {**kwargs, "block_size": block_size}
        return kwargs

    @property
    def tokens(self) -> bool:
        """Built from data.vocab_size and fed token ids, not shaped by images."""
        return self.input is not InputKind.IMAGES

    def complete(self, kwargs: Kwargs) -> dict[str, float]:
        return {**{key: kwarg.default for key, kwarg in self.kwargs.items()}, **kwargs}

    def kwarg_problems(self, arch: str, kwargs: Kwargs) -> list[Problem]:
        allowed = ", ".join(self.kwargs) or "none"
        problems = []
        for key, value in kwargs.items():
            field = f"model.kwargs.{key}"
            if key not in self.kwargs:
                problems.append(Problem(field, f"{field} is not accepted for {arch}", f"allowed: {allowed}"))
            elif (problem := self.kwargs[key].problem(field, value)) is not None:
                problems.append(problem)
        return problems

    def module_names(self, kwargs: Kwargs) -> tuple[str, ...]:
        return self.modules(self.complete(kwargs))

    def approx_params(self, kwargs: Kwargs, vocab_size: int) -> float:
        return self.params(self.complete(kwargs), vocab_size)

    def split_points(self, names: Sequence[str]) -> tuple[str, ...]:
        """Where a default split may start a stage, in order; a stage never starts at the first module."""
        if self.split_candidates is None:
            return tuple(names[1:])
        candidates = self.split_candidates
        return tuple(
            name
            for name in names
            if name in candidates or (name.rpartition(".")[0] in candidates and not name.endswith(".0"))
        )

    def unties(self, kwargs: Kwargs, spread: bool) -> bool:
        """A tied model spread over devices unties its head unless model.kwargs.tie_embeddings says
        otherwise (the planner refuses tie_embeddings=1 there): torchtitan's pipelined LMs are untied too."""
        return self.tied and spread and "tie_embeddings" not in kwargs

    def untied_when_spread(self, kwargs: Kwargs, spread: bool) -> Kwargs:
        return {**kwargs, "tie_embeddings": 0} if self.unties(kwargs, spread) else kwargs

    def max_stages(self, names: Sequence[str]) -> int:
        """How many stages the default split points can give."""
        return len(self.split_points(names)) + 1

    def in_channels(self, data_channels: int) -> int:
        """Grayscale is expanded to 3 channels on the device for RGB models; other mismatches fail."""
        if not self.rgb or data_channels == 3:
            return data_channels
        if data_channels == 1:
            return 3
        raise refuse(
            "data.channels",
            f"this model takes 3-channel images but the data has {data_channels}",
            "use data.channels 1 or 3",
        )

    def image_size(self, requested: int | None, native: int) -> int:
        if requested is None:
            return max(native, self.min_image_size)
        if requested < self.min_image_size:
            raise refuse(
                "data.image_size",
                f"data.image_size={requested} is too small for this model",
                f"use at least {self.min_image_size}",
            )
        return requested


def named(*names: str) -> ModuleNames:
    return lambda _kwargs: names


def numbered(count: Callable[[Kwargs], int]) -> ModuleNames:
    """An nn.Sequential's children are named by position."""
    return lambda kwargs: tuple(str(i) for i in range(count(kwargs)))


def about(params: float) -> ParamCount:
    return lambda _kwargs, _vocab_size: params


RESNET_MODULES = named(
    "conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc"
)
FEATURES_THEN_CLASSIFIER = named("features", "avgpool", "classifier")
# Torchvision stems and pools make poor stage boundaries. Two stages take the middle candidate: resnets after
# layer2, alexnet and vgg between their convolutional features and the classifier.
RESNET_SPLITS = ("layer1", "layer2", "layer3", "layer4", "avgpool")
CLASSIFIER_SPLITS = ("avgpool", "classifier")

# Torchvision classifiers: RGB stems, convolutional, built from scratch.
RESNET18 = ArchInfo(
    InputKind.IMAGES,
    kwargs={},
    modules=RESNET_MODULES,
    params=about(11.7e6),
    min_image_size=32,
    rgb=True,
    convolutional=True,
    split_candidates=RESNET_SPLITS,
)
ALEXNET = ArchInfo(
    InputKind.IMAGES,
    kwargs={"dropout": Kwarg(float, 0.0, 0.9, default=0.5)},
    modules=FEATURES_THEN_CLASSIFIER,
    params=about(57e6),
    min_image_size=63,
    rgb=True,
    convolutional=True,
    split_candidates=CLASSIFIER_SPLITS,
)


def gpt_params(kwargs: Kwargs, vocab_size: int) -> float:
    """Per block 12 * n_embd^2 in attention and MLP matrices; the token embedding, and the head unless tied
    to it; positions."""
    n_embd, tables = kwargs["n_embd"], 2 - kwargs["tie_embeddings"]
    return 12 * kwargs["n_layer"] * n_embd**2 + (tables * vocab_size + kwargs["block_size"]) * n_embd


def gpt_modules(kwargs: Kwargs) -> tuple[str, ...]:
    blocks = tuple(f"blocks.{i}" for i in range(int(kwargs["n_layer"])))
    return ("wte", "wpe", "drop", *blocks, "ln_f", "lm_head")


GPT = ArchInfo(
    InputKind.TOKENS,
    kwargs={
        "n_layer": Kwarg(int, 1, 256, default=12),
        "n_head": Kwarg(int, 1, 256, default=12),
        "n_embd": Kwarg(int, 8, 32768, default=768),
        # Below data.block_size the windows would not fit; the default is data.block_size.
        "block_size": Kwarg(int, 1, 65536, default=1024),
        "dropout": Kwarg(float, 0.0, 0.9, default=0.0),
        "bias": Kwarg(int, 0, 1, default=0),  # 1: GPT-2's biases in Linear and LayerNorm
        "tie_embeddings": Kwarg(int, 0, 1, default=1),  # 0: the head has a weight of its own
    },
    modules=gpt_modules,
    params=gpt_params,
    split_candidates=("blocks",),  # stages over blocks: the embeddings go first, ln_f and the head last
    tied=True,
)

ARCHS: dict[Arch, ArchInfo] = {
    Arch.MLP: ArchInfo(
        InputKind.IMAGES,
        kwargs={"hidden": Kwarg(int, 4, 16384, default=256), "depth": Kwarg(int, 1, 32, default=2)},
        # Flatten, then (Linear, ReLU) per layer of depth, then Linear.
        modules=numbered(lambda kwargs: 2 * int(kwargs["depth"]) + 2),
        params=about(1e6),
    ),
    Arch.SMALL_CNN: ArchInfo(
        InputKind.IMAGES,
        kwargs={"channels": Kwarg(int, 4, 1024, default=32)},
        modules=numbered(lambda _kwargs: 8),
        params=about(1e6),
        min_image_size=4,
        convolutional=True,
    ),
    Arch.ALEXNET: ALEXNET,
    Arch.RESNET18: RESNET18,
    Arch.RESNET50: replace(RESNET18, params=about(25.6e6)),
    # Five 2x max-pools before an adaptive pool: 32 px reach it as 1x1 (the pool then copies it 7x7).
    Arch.VGG11: replace(ALEXNET, params=about(129e6), min_image_size=32),
    Arch.EMBEDDING_BAG: ArchInfo(
        InputKind.TOKEN_BAGS,
        kwargs={"embedding_dim": Kwarg(int, 1, 4096, default=64)},
        modules=named("embedding", "classifier"),
        # The table is the model: at recommender sizes it is all that matters.
        params=lambda kwargs, vocab_size: vocab_size * kwargs["embedding_dim"],
        sparse=True,
    ),
    Arch.GPT: GPT,
    # A Hugging Face causal LM from model.path (trainers/models/hf.py), its size in its config.json, which
    # the planner does not read: taken as large, so strategy auto shards it over several processes. One
    # top-level module: it is not split into stages.
    Arch.HF_CAUSAL_LM: ArchInfo(InputKind.TOKENS, kwargs={}, modules=named("model"), params=about(1e9)),
}


def arch_info(name: str) -> ArchInfo:
    """The entry of model.arch `name`, for code that takes it outside a validated spec."""
    if name not in ARCHS:
        raise refuse("model.arch", f"unknown model.arch {name!r}", f"choose one of {choices()}")
    return ARCHS[Arch(name)]


def choices() -> str:
    return ", ".join(ARCHS)


def archs_of(kind: InputKind) -> list[Arch]:
    return [name for name, info in ARCHS.items() if info.input is kind]

"""What a job trains: the model and data sections of the spec. Each is a built-in entry of the catalogue or a
factory in the user's code bundle (`module:function`), never both. Field-level checks only; whether a
factory fits the rest of the spec is the planner's question. No torch.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, cast

from pydantic import Field, JsonValue, TypeAdapter, ValidationInfo, field_validator, model_validator

from jobspec.catalog.archs import Arch
from jobspec.catalog.datasets import DatasetName
from jobspec.data_store import STORED_DATASETS, is_store_root, parse_store_root
from jobspec.decode_plan import GPU_DECODE_KEEPS
from jobspec.spec_augment import AugmentSpec, Decode, OnBadSample
from jobspec.spec_env import SECRET_NAME_PATTERN
from jobspec.spec_fields import Choice, EntryPoint, KwargValue, Section, known

_ARCH_KWARGS: TypeAdapter[dict[str, float]] = TypeAdapter(dict[str, KwargValue])
ModuleName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.]+$")]


def relative_path(field: str, path: str | None) -> str | None:
    """A directory named relative to TRAINYARD_DATA_DIR: never absolute, never climbing out with '..'."""
    if path is None:
        return None
    parts = path.replace("\\", "/").split("/")
    if path.startswith(("/", "~")) or ".." in parts or "\x00" in path:
        raise ValueError(
            f"{field} {path!r} must be a path inside TRAINYARD_DATA_DIR, like 'cifar10'; "
            "no absolute paths or '..'"
        )
    return path


def exactly_one(section: str, builtin: str, given: tuple[object, object], registry: str) -> None:
    """A section names a built-in (arch, dataset) or a factory, and the message names both fields."""
    chosen, factory = given
    if chosen is not None and factory is not None:
        raise ValueError(
            f"{section}.{builtin} and {section}.factory exclude each other: {section}.{builtin} picks a "
            f"built-in {registry}, {section}.factory builds your own; give one of them"
        )
    if chosen is None and factory is None:
        raise ValueError(
            f"give {section}.{builtin} (a built-in {registry}) or {section}.factory ('module:function' "
            "in your code bundle)"
        )


class LoraSpec(Section):
    """Low-rank adapters (peft's LoRA) on a Hugging Face model: only they train, the model stays frozen."""

    r: int = Field(8, ge=1, le=1024, description="the adapters' rank")
    alpha: int = Field(16, ge=1, le=65536, description="scaling: updates are multiplied by alpha / r")
    dropout: float = Field(0.05, ge=0.0, le=0.9, description="dropout on the adapters' input")
    target_modules: list[ModuleName] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="names (or name endings) of the Linear layers that get adapters, like ['q_proj', "
        "'v_proj']; default: peft's choice for the model type",
    )


class ModelSpec(Section):
    """A built-in architecture (`arch`) or your own (`factory`, a function of the code bundle: see
    [User code](#user-code)); exactly one of them."""

    arch: Choice[Arch] | None = Field(None, description="a built-in architecture: see the table below")
    factory: EntryPoint | None = Field(
        None, description="'module:function' in the code bundle: called as function(**kwargs) -> nn.Module"
    )
    kwargs: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="arch: the constructor args it allows (table below); factory: any JSON object, "
        "passed as keyword arguments",
    )
    path: str | None = Field(
        None,
        max_length=1024,
        description="hf_causal_lm: a directory relative to TRAINYARD_DATA_DIR holding config.json, the "
        "weights as *.safetensors and optionally the tokenizer; nothing is downloaded",
    )
    config_only: bool = Field(
        False, description="hf_causal_lm: random weights from model.path's config.json; no weights read"
    )
    lora: LoraSpec | None = Field(None, description="hf_causal_lm: train low-rank adapters only; see below")
    export: bool = Field(
        True,
        description="hf_causal_lm: at the job's end, write the (merged) weights that GET "
        "/v1/jobs/{id}/export serves",
    )

    @field_validator("path")
    @classmethod
    def relative_model_path(cls, path: str | None) -> str | None:
        return relative_path("model.path", path)

    @field_validator("arch", mode="before")
    @classmethod
    def known_arch(cls, arch: object) -> object:
        return known(Arch, "model.arch", arch)

    @field_validator("kwargs")
    @classmethod
    def numbers_for_an_arch(cls, kwargs: dict[str, JsonValue], info: ValidationInfo) -> dict[str, JsonValue]:
        """A built-in architecture takes JSON numbers only (each one allow-listed by the planner)."""
        if info.data.get("factory") is None:
            # Raised from here, its errors keep their own keys: model.kwargs.<name>.
            _ARCH_KWARGS.validate_python(kwargs)
        return kwargs

    @model_validator(mode="after")
    def one_model(self) -> ModelSpec:
        exactly_one("model", "arch", (self.arch, self.factory), "architecture")
        return self

    @property
    def arch_kwargs(self) -> dict[str, float]:
        """kwargs as the catalogue reads them: numbers, as numbers_for_an_arch checked."""
        return cast("dict[str, float]", self.kwargs)


class DataPlacement(StrEnum):
    AUTO = "auto"
    GPU = "gpu"
    CPU = "cpu"
    STREAM = "stream"  # image_folder, shards: read and decoded per epoch, never held whole


class TokenDtype(StrEnum):
    """How wide a token file's ids are: uint16 holds vocabularies up to 65,536 (GPT-2's 50,257)."""

    UINT16 = "uint16"
    UINT32 = "uint32"

    @property
    def itemsize(self) -> int:
        return int(self.value.removeprefix("uint")) // 8


class DataCredentials(Section):
    """The secret that opens an s3:// data.root: a JSON object of the store's keys, which the worker hands to
    the ranks' environment alone when it starts each attempt (docs/data.md)."""

    secret: str = Field(
        pattern=SECRET_NAME_PATTERN,
        description="the name of a secret of yours (POST /v1/secrets), or one an admin shared: "
        '{"access_key_id": ..., "secret_access_key": ..., "endpoint_url": ..., "region": ...}',
    )


class DataSpec(Section):
    """A built-in dataset (`dataset`) or your own (`factory`, a function of the code bundle: see
    [User code](#user-code)); exactly one of them."""

    dataset: Choice[DatasetName] | None = Field(None, description="a built-in dataset: see the table below")
    factory: EntryPoint | None = Field(
        None,
        description="'module:function' in the code bundle: called as function(**kwargs, root=...) -> "
        "(train, val | None) or (train, val, collate) of torch Datasets",
    )
    kwargs: dict[str, JsonValue] = Field(
        default_factory=dict, description="factory only: any JSON object, passed as keyword arguments"
    )
    root: str | None = Field(
        None,
        max_length=1024,
        description="cifar10, mnist, image_folder, shards, tokens, text, factory: a directory relative to "
        "TRAINYARD_DATA_DIR "
        "(a factory gets it resolved, as root=); image_folder, shards, tokens: or s3://bucket/prefix in an "
        "object store, streamed",
    )
    credentials: DataCredentials | None = Field(
        None,
        description='an s3:// data.root: {"secret": NAME}, a secret holding a JSON object of access_key_id, '
        "secret_access_key and optionally session_token, endpoint_url, region; unset: the worker's own "
        "(its AWS_* variables), for jobs without a code bundle",
    )
    cache_bytes: int = Field(
        2**30,
        ge=0,
        le=2**40,
        description="an s3:// data.root: bytes of what was read that each host keeps in the job's run "
        "directory for the next epoch (0: none); at most TRAINYARD_DATA_CACHE_MAX_BYTES",
    )
    num_samples: int = Field(
        4096, ge=16, le=10_000_000, description="synthetic: training samples; synthetic_tokens: windows"
    )
    num_classes: int = Field(10, ge=2, le=1000, description="synthetic only: classes")
    channels: int = Field(3, ge=1, le=4, description="synthetic only: image channels")
    image_size: int | None = Field(
        None, ge=4, le=512, description="image models: side of the square images they see; default per model"
    )
    val_fraction: float = Field(
        0.1,
        ge=0.0,
        le=0.5,
        description="share held out for evaluation; cifar10, mnist: their test split; tokens, text: this "
        "share of the last tokens (tokens: val.bin instead when there is one)",
    )
    placement: Choice[DataPlacement] = Field(
        DataPlacement.AUTO,
        description="built-in datasets: where batches live: auto, gpu (GPU jobs only), cpu, or stream "
        "(image_folder, shards); auto streams those when they would fill more than a quarter of the free "
        "memory",
    )
    vocab_size: int = Field(
        10_000,
        ge=2,
        le=20_000_000,
        description="synthetic_bags, synthetic_tokens: distinct token ids; tokens: every id must be below it "
        "(GPT-2's: 50257); gpt: its vocabulary",
    )
    bag_size: int = Field(16, ge=1, le=1024, description="synthetic_bags: tokens per sample")
    block_size: int | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description="tokens, text, synthetic_tokens: token ids a sample's input holds; its target is the "
        "same window one token later",
    )
    token_dtype: Choice[TokenDtype] = Field(TokenDtype.UINT16, description="tokens: the width of the ids")
    tokenizer: str | None = Field(
        None,
        max_length=1024,
        description="text: a directory relative to TRAINYARD_DATA_DIR holding tokenizer.json (a `tokenizers` "
        "or Hugging Face transformers tokenizer, saved)",
    )
    text_field: str = Field(
        "text", min_length=1, max_length=128, description="text: the .jsonl field or .parquet column read"
    )
    loader_workers: int = Field(
        2,
        ge=0,
        le=64,
        description="DataLoader worker processes: a factory's datasets, image_folder's and shards' decoding, "
        "token windows",
    )
    load_size: int | None = Field(
        None,
        ge=4,
        le=1024,
        description="image_folder, shards: side images are decoded to (shorter side resized, middle square "
        "kept) before the device crops them to data.image_size; default: data.image_size, else 64",
    )
    decode: Choice[Decode] = Field(
        Decode.AUTO,
        description="streamed image_folder, shards: cpu (loader workers), gpu (nvJPEG, JPEGs only), or auto: "
        "when the loader workers, timed on the job's first JPEGs at start, decode under "
        f"{GPU_DECODE_KEEPS:.0%} of the images a second the forecast says the model takes, they decode "
        "their part of each batch and the GPU the rest; else cpu",
    )
    on_bad_sample: Choice[OnBadSample] = Field(
        OnBadSample.FAIL,
        description="image_folder, shards: an unreadable image fails the job, or is skipped (replaced by the "
        "next one) and counted in the bad_samples metric",
    )
    augment: AugmentSpec | None = Field(
        None, description="cifar10, mnist, image_folder, shards: augmentation on the device; see below"
    )

    @field_validator("dataset", mode="before")
    @classmethod
    def known_dataset(cls, dataset: object) -> object:
        return known(DatasetName, "data.dataset", dataset)

    @field_validator("root", "tokenizer")
    @classmethod
    def relative_root(cls, root: str | None, info: ValidationInfo) -> str | None:
        if info.field_name == "root" and is_store_root(root):
            assert root is not None
            parse_store_root(root)
            return root
        return relative_path(f"data.{info.field_name}", root)

    @model_validator(mode="after")
    def one_source(self) -> DataSpec:
        exactly_one("data", "dataset", (self.dataset, self.factory), "dataset")
        if self.kwargs and self.factory is None:
            raise ValueError("data.kwargs are passed to data.factory, and none is given; drop data.kwargs")
        if "root" in self.kwargs:
            raise ValueError(
                "data.kwargs.root: set data.root instead; it is kept inside TRAINYARD_DATA_DIR and passed to "
                "the factory resolved, as root="
            )
        return self.stored_root()

    def stored_root(self) -> DataSpec:
        """An object store holds what is read by name and range: image_folder, shards and tokens."""
        if is_store_root(self.root) and self.dataset not in STORED_DATASETS:
            kinds = ", ".join(sorted(STORED_DATASETS))
            raise ValueError(
                f"data.root: an s3:// root is read for data.dataset {kinds}, not "
                f"{self.dataset or 'data.factory'}; copy the data under TRAINYARD_DATA_DIR, or use one of "
                "them"
            )
        if self.credentials is not None and not is_store_root(self.root):
            raise ValueError(
                "data.credentials open an object store, and data.root is no s3:// root; drop data.credentials"
            )
        return self

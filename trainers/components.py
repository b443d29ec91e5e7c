"""What the training loop drives, built once per rank from the run config: the model (a built-in architecture
or the code bundle's model.factory), the strategy around it, the optimizer, precision, the objective, the
training batches and the held-out split.

A built-in dataset stays resident on the device and is cut into batches there (the fast path,
trainers/data/__init__.py), unless image_folder or shards stream (trainers/data/streamed.py); a
data.factory's datasets go through DataLoaders (trainers/data/loader.py). Either way the loop sees optimizer
steps of micro-batches, augmented on the device where data.augment says (trainers/data/augment.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Protocol

import torch
from torch import nn

from jobspec.catalog.archs import Arch
from jobspec.catalog.datasets import DATASETS, InputKind
from jobspec.plan import Plan, RunConfig
from jobspec.spec import DevicePlacement, JobSpec, ParallelSpec, Strategy
from jobspec.stages import default_split_at, spread_over_devices
from jobspec.startup import Mark, mark
from trainers.data import (
    AsStored,
    BatchShape,
    DeviceFeeder,
    LoadedData,
    TrainBatches,
    load_dataset,
    storage_device,
)
from trainers.data.augment import Transformed, views
from trainers.data.batches import Batch, Counts, no_counts
from trainers.data.held_out import HeldOut, LoaderHeldOut, ResidentHeldOut
from trainers.data.steps import Batching, loader_steps
from trainers.data.streamed import StreamedImages, load_images, streamed_feeds
from trainers.data.tokens import load_tokens
from trainers.data.user import UserData, load_user_data
from trainers.dist_env import DistEnv
from trainers.graphs import captures_step
from trainers.lm import LanguageModel, Throughput, peak_flops
from trainers.models import build_model, get_arch
from trainers.models.hf import Export, build_hf, exporter, own_blocks
from trainers.objectives import Objective, build_objective
from trainers.performance import checkpoint_activations, convolutional, set_cudnn_benchmark
from trainers.placement import unit_names
from trainers.precision import MixedPrecision
from trainers.strategies import GroupOptions, ParallelStrategy, build_strategy
from trainers.strategies.base import Forward
from trainers.user_code import Bundle, build_user_model

Data = LoadedData | StreamedImages | UserData  # held whole, streamed image files, or through DataLoaders
LAYERS_KWARG = "n_layer"  # the built-in language model's blocks (jobspec/catalog/archs.py's gpt)


class TrainSource(Protocol):
    """Endless optimizer steps of micro-batches, on the device, from a given step on."""

    @property
    def steps_per_epoch(self) -> int: ...

    @property
    def per_rank_batch(self) -> int: ...

    def from_step(self, done: int) -> Iterator[list[Batch]]: ...


@dataclass
class Components:
    """Everything the loop drives, built once per rank."""

    strategy: ParallelStrategy
    forward: Forward  # the wrapped (and maybe compiled) model
    optimizer: torch.optim.Optimizer
    precision: MixedPrecision
    objective: Objective
    batches: TrainSource
    held_out: HeldOut
    counts: Counts = no_counts  # the data reader's running counts, reported with the training metrics
    throughput: Throughput | None = None  # a language model's tokens/s and MFU
    export: Export | None = None  # writes a finished job's merged weights (hf_causal_lm)
    trainable_only: bool = False  # checkpoints leave out the frozen model (LoRA)
    capture_stream: torch.cuda.Stream | None = None  # where the step is captured (performance.cuda_graphs)


def build_device(parallel: ParallelSpec, strategy: Strategy, device: torch.device) -> torch.device:
    """Where the model is made and initialised: the rank's device when the whole model stays there.

    ResNet-50's initialisation takes over 3 s on the CPU of an H200 box and milliseconds on its GPU, and
    every rank seeds alike, so replicas still start identical. A model split over devices (stages, or
    modules placed on the CPU) is made on the CPU and moved a module at a time, so that no GPU ever holds
    more of it than its own part: an embedding table placed on the CPU because the GPU has no room for it
    must not pass through the GPU.
    """
    split = strategy in (Strategy.MODEL_PARALLEL, Strategy.PIPELINE)
    on_cpu = DevicePlacement.CPU in (parallel.placement or {}).values()
    return torch.device("cpu") if split or on_cpu else device


def with_stages(spec: JobSpec, plan: Plan, model: nn.Module) -> ParallelSpec:
    """The parallel section with the stage split and micro-batches the plan implies filled in."""
    if plan.stages == 1:
        return spec.parallel
    names = unit_names(model)
    split_at = spec.parallel.split_at or default_split_at(spec.inputs.model.arch, names, plan.stages)
    return spec.parallel.model_copy(update={"split_at": split_at, "microbatches": plan.microbatches})


def resident_shape(spec: JobSpec, data: LoadedData | StreamedImages) -> BatchShape:
    """How a built-in dataset's batches are shaped for the model: a built-in model's size and channels, or
    for a factory's model the data's own (channels_last is decided once the model exists)."""
    model, wanted = spec.inputs
    if model.arch is None:
        return BatchShape(wanted.image_size or data.native_size, data.channels, channels_last=False)
    arch = get_arch(model.arch)
    if arch.tokens != data.tokens:
        raise ValueError(
            f"model.arch {model.arch} does not fit data.dataset {wanted.dataset}: embedding_bag "
            "takes bags of token ids (synthetic_bags), every other model takes images"
        )
    size = arch.image_size(wanted.image_size, data.native_size)
    return BatchShape(size, arch.in_channels(data.channels), channels_last=False)


def needed(bundle: Bundle | None, field: str) -> Bundle:
    """The planner refuses user code without a bundle; a config written by hand may still lack one."""
    if bundle is None:
        raise ValueError(f"{field} names user code, and the job has no code bundle; set code")
    return bundle


def load_data(spec: JobSpec, plan: Plan, bundle: Bundle | None, device: torch.device) -> Data:
    """A factory's datasets and the token datasets are read through DataLoaders; image_folder and shards
    are held whole or streamed (jobspec/data_plan.py); the others are resident."""
    if spec.inputs.data.factory is not None:
        return load_user_data(needed(bundle, "data.factory"), spec.inputs.data)
    if spec.inputs.data.dataset is not None and DATASETS[spec.inputs.data.dataset].input is InputKind.TOKENS:
        return load_tokens(spec.inputs.data, spec.train.seed)
    if spec.inputs.data.dataset is not None and DATASETS[spec.inputs.data.dataset].streams:
        return load_images(spec, plan, device)
    return load_dataset(spec.inputs.data, spec.train.seed)


def make_model(
    spec: JobSpec, strategy: Strategy, data: Data | None, bundle: Bundle | None, layers: int | None = None
) -> nn.Module:
    """The bare model: model.factory(**kwargs), or a built-in architecture sized by its dataset: a language
    model by the vocabulary and windows of its token dataset, its head untied when spread over devices.
    `layers` makes a language model of that many blocks instead (a forecast traces a few:
    trainers/forecast/)."""
    model, data_spec = spec.inputs
    if model.factory is not None:
        return build_user_model(needed(bundle, "model.factory"), model.factory, model.kwargs)
    if model.arch is Arch.HF_CAUSAL_LM:
        return build_hf(model, data_spec, layers)
    if model.arch is not None and get_arch(model.arch).language_model:
        info = get_arch(model.arch)
        spread = spread_over_devices(spec.parallel, strategy)
        kwargs = info.untied_when_spread(info.with_context(model.arch_kwargs, data_spec.block_size), spread)
        kwargs = kwargs if layers is None else {**kwargs, LAYERS_KWARG: layers}
        vocab = data_spec.vocab_size
        return build_model(model.arch, kwargs, 0, vocab, 0, vocab_size=vocab)
    if data is None or isinstance(data, UserData) or model.arch is None:
        raise ValueError("a built-in model.arch is sized by a built-in data.dataset")
    shape = resident_shape(spec, data)
    return build_model(
        model.arch,
        model.arch_kwargs,
        shape.channels,
        data.num_classes,
        shape.image_size,
        vocab_size=data_spec.vocab_size,
    )


def language_model(spec: JobSpec) -> bool:
    arch = spec.inputs.model.arch
    return arch is not None and get_arch(arch).language_model


def throughput(spec: JobSpec, plan: Plan, model: nn.Module, device: torch.device) -> Throughput | None:
    """A language model's tokens/s and MFU, against the peak of every GPU the job holds (by this rank's
    GPU's name: a job's GPUs are alike)."""
    if not isinstance(model, LanguageModel) or spec.inputs.data.block_size is None:
        return None
    per_gpu = peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    peak = None if per_gpu is None else per_gpu * plan.total_gpus
    return Throughput(spec.inputs.data.block_size, model.flops_per_token(), peak)


def feeds(
    spec: JobSpec, plan: Plan, strategy: ParallelStrategy, data: Data, channels_last: bool
) -> tuple[TrainSource, HeldOut, Counts]:
    """Training batches and the held-out split, delivered where the strategy's first module lives, and
    what the reader counts."""
    device, seed, env = strategy.input_device, spec.train.seed, strategy.data_env
    workers = spec.inputs.data.loader_workers
    batching = Batching(plan.per_rank_batch, plan.micro_batch, seed, workers, device)
    if isinstance(data, UserData):
        steps = loader_steps(data, env, batching, spec.train.max_steps)
        return steps, LoaderHeldOut(data, workers, device), no_counts
    shape = replace(resident_shape(spec, data), channels_last=channels_last)
    train_view, held_out_view = views(spec, shape, data.num_classes, env.rank, device)
    if isinstance(data, StreamedImages):
        return streamed_feeds(data, spec, env, batching, (train_view, held_out_view))
    storage = storage_device(spec.inputs.data.placement, device)
    # Augmented batches leave the feeder as stored, to be augmented with their step's randomness.
    stored = shape if spec.inputs.data.augment is None else AsStored()
    batches = TrainBatches(
        DeviceFeeder(data.train, stored, device, storage), env, plan.per_rank_batch, plan.micro_batch, seed
    )
    held_out = ResidentHeldOut(DeviceFeeder(data.val, held_out_view, device, storage))
    train = batches if spec.inputs.data.augment is None else Transformed(batches, train_view)
    return train, held_out, no_counts


def build(config: RunConfig, env: DistEnv) -> Components:
    spec, plan = config.spec, config.plan
    # The same seed on every rank: identical initial weights, and one RNG stream that a checkpoint restores
    # exactly on every rank.
    torch.manual_seed(spec.train.seed)
    bundle = None if config.code_dir is None else Bundle(config.code_dir)
    data = load_data(spec, plan, bundle, env.device)
    mark(Mark.DATA_READY)
    with torch.device(build_device(spec.parallel, plan.strategy, env.device)):
        model = make_model(spec, plan.strategy, data, bundle)
    mark(Mark.MODEL_BUILT)
    rate = throughput(spec, plan, model, env.device)  # of the whole model, before a strategy shards it
    parallel = own_blocks(with_stages(spec, plan, model), model)
    if spec.performance.activation_checkpointing:
        model = checkpoint_activations(model, parallel.wrap)
    set_cudnn_benchmark(spec.performance, env.device, replicas_in_threads=plan.strategy is Strategy.DP)
    channels_last = spec.performance.channels_last and convolutional(model)
    if channels_last:
        model.to(memory_format=torch.channels_last)

    group = GroupOptions(plan.backend, timedelta(seconds=spec.limits.collective_timeout_s))
    strategy = build_strategy(plan.strategy, parallel, env, group, plan.precision)
    strategy.setup_environment()
    # A captured step's module is placed on the stream it is captured on (trainers/graphs.py), as torch's
    # recipe makes every lazily built piece of a step on that stream.
    capture = torch.cuda.Stream(env.device) if captures_step(spec, plan) else None
    # The strategy puts the model on its device(s); batches then go where its first module lives.
    with nullcontext() if capture is None else torch.cuda.stream(capture):
        forward: Forward = strategy.setup_module(model)
    objective = build_objective(spec.train.loss, bundle, language_model=language_model(spec))
    if spec.performance.compile:
        forward = strategy.compiled(forward)
        objective.compile_loss(strategy.loss_in_forward_graph, strategy.loss_carrier)
    batches, held_out, counts = feeds(spec, plan, strategy, data, channels_last)
    return Components(
        strategy=strategy,
        forward=forward,
        optimizer=strategy.setup_optimizer(spec.train, plan.lr),
        precision=MixedPrecision(plan.precision, env.device),
        objective=objective,
        batches=batches,
        held_out=held_out,
        counts=counts,
        throughput=rate,
        export=exporter(spec.inputs.model, model),
        trainable_only=spec.inputs.model.lora is not None,
        capture_stream=capture,
    )

"""The training loop, top to bottom: build, (resume,) train, evaluate, checkpoint, report.

Every rank runs all of it; rank 0 alone writes events and checkpoints. Collectives (metrics reports,
evaluation, checkpoint barriers) happen at steps every rank computes the same way, so ranks never wait on a
collective another rank skips. Every strategy runs this loop but hogwild (trainers/hogwild.py), which shares
its pieces and its bookkeeping (trainers/progress.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn

from trainers.checkpoint import load_checkpoint, restore
from trainers.data import (
    Batch,
    BatchShape,
    DeviceFeeder,
    TrainBatches,
    eval_batches,
    load_dataset,
    storage_device,
)
from trainers.dist_env import DistEnv
from trainers.metrics import TrainMetrics
from trainers.models import build_model, get_arch
from trainers.performance import checkpoint_activations, set_cudnn_benchmark
from trainers.plan import Plan, RunConfig
from trainers.precision import MixedPrecision
from trainers.profiling import StepProfiler
from trainers.progress import (
    Position,
    RunOutput,
    checkpoint_due,
    evaluation_due,
    report_due,
    total_steps,
)
from trainers.schedule import LrSchedule, lr_at, observe_eval_loss, plateau_state, set_lr
from trainers.spec import DevicePlacement, JobSpec, ParallelSpec, Strategy, TrainSpec
from trainers.stages import default_split_at
from trainers.strategies import GroupOptions, ParallelStrategy, build_strategy


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


def evaluate(
    batches: Iterable[Batch], precision: MixedPrecision, strategy: ParallelStrategy
) -> dict[str, float]:
    """Sums of loss, correct and count over every rank's shard, so the result is exact for uneven shards."""
    model = strategy.unwrap()
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=precision.device)
    for x, y in batches:
        sums += strategy.eval_sums(x, y, precision)
    model.train()
    loss_sum, correct, count = strategy.reduce_metrics(sums).tolist()
    return {"eval_loss": loss_sum / count, "eval_accuracy": correct / count}


@dataclass
class Components:
    """Everything the loop drives, built once per rank."""

    strategy: ParallelStrategy
    forward: Callable[[torch.Tensor], torch.Tensor]  # the wrapped (and maybe compiled) model
    optimizer: torch.optim.Optimizer
    precision: MixedPrecision
    batches: TrainBatches
    val_feed: DeviceFeeder


def with_stages(spec: JobSpec, plan: Plan, model: nn.Module) -> ParallelSpec:
    """The parallel section with the stage split and micro-batches the plan implies filled in."""
    if plan.stages == 1:
        return spec.parallel
    names = [name for name, _ in model.named_children()]
    split_at = spec.parallel.split_at or default_split_at(spec.model.arch, names, plan.stages)
    return spec.parallel.model_copy(update={"split_at": split_at, "microbatches": plan.microbatches})


def build(spec: JobSpec, plan: Plan, env: DistEnv) -> Components:
    # The same seed on every rank: identical initial weights, and one RNG stream that a checkpoint restores
    # exactly on every rank.
    torch.manual_seed(spec.train.seed)
    data = load_dataset(spec.data, spec.train.seed)
    arch = get_arch(spec.model.arch)
    shape = BatchShape(
        image_size=arch.image_size(spec.data.image_size, data.native_size),
        channels=arch.in_channels(data.channels),
        channels_last=spec.performance.channels_last and arch.convolutional,
    )
    if arch.tokens != data.tokens:
        raise ValueError(
            f"model.arch {spec.model.arch} does not fit data.dataset {spec.data.dataset}: embedding_bag "
            "takes bags of token ids (synthetic_bags), every other model takes images"
        )
    with torch.device(build_device(spec.parallel, plan.strategy, env.device)):
        model = build_model(
            spec.model.arch,
            spec.model.kwargs,
            shape.channels,
            data.num_classes,
            shape.image_size,
            vocab_size=spec.data.vocab_size,
        )
    if spec.performance.activation_checkpointing:
        model = checkpoint_activations(model)
    set_cudnn_benchmark(spec.performance, env.device, replicas_in_threads=plan.strategy is Strategy.DP)
    if shape.channels_last:
        model.to(memory_format=torch.channels_last)

    group = GroupOptions(plan.backend, timedelta(seconds=spec.limits.collective_timeout_s))
    strategy = build_strategy(plan.strategy, with_stages(spec, plan, model), env, group)
    strategy.setup_environment()
    # The strategy puts the model on its device(s); batches then go where its first module lives.
    forward: Callable[[torch.Tensor], torch.Tensor] = strategy.setup_module(model)
    if spec.performance.compile:
        forward = strategy.compiled(forward)
    storage = storage_device(spec.data.placement, strategy.input_device)
    train_feed = DeviceFeeder(data.train, shape, strategy.input_device, storage)
    return Components(
        strategy=strategy,
        forward=forward,
        optimizer=strategy.setup_optimizer(spec.train, plan.lr),
        precision=MixedPrecision(plan.precision, env.device),
        batches=TrainBatches(
            train_feed, strategy.data_env, plan.per_rank_batch, plan.micro_batch, spec.train.seed
        ),
        val_feed=DeviceFeeder(data.val, shape, strategy.input_device, storage),
    )


def resume(plan: Plan, run_dir: Path, c: Components) -> int:
    """Optimizer steps already done: 0 for a fresh run, the checkpoint's step when resuming."""
    if plan.resume_path is None:
        return 0
    # A relative path is taken from the run directory; an absolute one (an earlier attempt's) wins.
    state = load_checkpoint(run_dir / plan.resume_path, c.precision.device)
    done = restore(state, c.strategy, c.optimizer, c.precision)
    print(f"resumed from {plan.resume_path} after step {done}", flush=True)
    return done


def train_step(c: Components, micro_batches: list[Batch], train: TrainSpec, metrics: TrainMetrics) -> None:
    """One optimizer step over the accumulation micro-batches: forward, backward, clip, update."""
    for i, (x, y) in enumerate(micro_batches):
        # Gradients are all-reduced only on the last micro-step; earlier ones accumulate locally.
        last_micro = i == len(micro_batches) - 1
        with nullcontext() if last_micro else c.strategy.no_sync():
            # Divided by k so that k micro-steps sum to the gradient of one step over the whole batch.
            loss = c.strategy.forward_backward(c.forward, x, y, c.precision, train.grad_accum_steps)
        metrics.add(loss, len(y))
    c.strategy.optimizer_step(c.optimizer, c.precision, train.clip_grad_norm)


def train(config: RunConfig, run_dir: Path, env: DistEnv) -> bool:
    """True when training ran to the end; False when a SIGTERM stopped it after a final checkpoint."""
    spec, plan = config.spec, config.plan
    c = build(spec, plan, env)
    done = resume(plan, run_dir, c)
    per_epoch = c.batches.steps_per_epoch
    total = total_steps(spec.train, per_epoch)
    schedule = LrSchedule.from_spec(spec.train, plan.lr, total, per_epoch)
    output = RunOutput(run_dir, spec, total, env.is_main)
    metrics = TrainMetrics(c.strategy, env.device, start_step=done)

    profiler = StepProfiler(spec.profile, run_dir, env, output.events, done)
    output.running()
    stopping = False
    for step, micro_batches in zip(range(done + 1, total + 1), c.batches.from_step(done), strict=False):
        lr = lr_at(step - 1, schedule, plateau_state(c.optimizer).factor)
        set_lr(c.optimizer, lr)
        train_step(c, micro_batches, spec.train, metrics)
        profiler.step()

        at = Position.of(step, per_epoch, total)
        if report_due(spec.metrics, at):
            output.report_training(at, metrics.report(step, lr))
        if len(c.val_feed) and evaluation_due(spec.train, at):
            shard = eval_batches(c.val_feed, c.strategy.data_env, c.batches.per_rank_batch)
            values = evaluate(shard, c.precision, c.strategy)
            output.report(at, values)
            observe_eval_loss(c.optimizer, spec.train, values["eval_loss"])
        # A SIGTERM (max_runtime, cancel) stops every rank at the same report step, after a final checkpoint.
        stopping = step % spec.metrics.every_n_steps == 0 and not at.last and env.stop.agreed(env.device)
        if checkpoint_due(spec.checkpoint, at) or stopping:
            # Every rank takes part: a sharded strategy gathers the full state here.
            model_state, optimizer_state = c.strategy.full_state(c.optimizer)
            output.checkpoint(model_state, optimizer_state, c.precision, at)
        if stopping:
            break
    profiler.close()
    # Before teardown: its barrier holds the other ranks until rank 0's last checkpoint is durable.
    output.close(finished=not stopping)
    c.strategy.teardown()
    return not stopping

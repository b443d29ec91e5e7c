"""The training loop, top to bottom: build, (resume,) train, evaluate, checkpoint, report.

Every rank runs all of it; rank 0 alone writes events and checkpoints. Collectives (metrics reports,
evaluation, checkpoint barriers) happen at steps every rank computes the same way, so ranks never wait on a
collective another rank skips. Every strategy runs this loop but hogwild (trainers/hogwild.py), which shares
its pieces and its bookkeeping (trainers/progress.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch

from jobspec.plan import Plan, RunConfig
from jobspec.spec import CudaGraphs, OnNonFinite, Strategy, TrainSpec
from trainers.checkpoint import load_checkpoint, restore
from trainers.components import Components, build
from trainers.data.batches import Batch, batch_size
from trainers.dist_env import DistEnv
from trainers.graphs import DDP_WARMUP_STEPS, WARMUP_STEPS, Agree, Done, StepGraph
from trainers.lora import trainable_state
from trainers.metrics import TrainMetrics
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
from trainers.strategies import ParallelStrategy


def any_rank(strategy: ParallelStrategy, flag: torch.Tensor) -> bool:
    """Whether this flag (a boolean tensor of one element) is set on any rank: a collective."""
    return bool(strategy.reduce_metrics(flag.to(strategy.env.device, torch.float64).reshape(1)).item() > 0)


def any_left(strategy: ParallelStrategy) -> Callable[[bool], bool]:
    """Whether any rank still has a held-out batch, given this rank's answer: a collective."""

    def agreed(has_batch: bool) -> bool:
        return any_rank(strategy, torch.tensor(has_batch))

    return agreed


def mean_over_ranks(strategy: ParallelStrategy) -> Agree:
    """Each value's mean over every rank: a collective."""

    def mean(values: list[float]) -> list[float]:
        sums = strategy.reduce_metrics(torch.tensor(values, dtype=torch.float64, device=strategy.env.device))
        return [total / strategy.env.world_size for total in sums.tolist()]

    return mean


def evaluate(c: Components, batch_size: int) -> dict[str, float]:
    """The objective's evaluation metrics over every rank's shard of the held-out split, from sums, so the
    result is exact for uneven shards. The repeats that keep the ranks' forwards in step count nothing."""
    model = c.strategy.unwrap()
    model.eval()
    total: torch.Tensor | None = None
    for batch, counted in c.held_out.shard(c.strategy.data_env, batch_size, any_left(c.strategy)):
        sums = c.strategy.eval_sums(batch, c.objective, c.precision)
        sums = sums if counted else torch.zeros_like(sums)
        total = sums if total is None else total + sums
    model.train()
    if total is None:
        raise RuntimeError("the held-out split gave this rank no batch to evaluate")
    return c.objective.eval_values(c.strategy.reduce_metrics(total).tolist())


def resume(plan: Plan, run_dir: Path, c: Components) -> int:
    """Optimizer steps already done: 0 for a fresh run, the checkpoint's step when resuming."""
    if plan.resume_path is None:
        return 0
    # A relative path is taken from the run directory; an absolute one (an earlier attempt's) wins.
    state = load_checkpoint(run_dir / plan.resume_path, c.precision.device)
    done = restore(state, c.strategy, c.optimizer, c.precision)
    print(f"resumed from {plan.resume_path} after step {done}", flush=True)
    return done


def micro_steps(c: Components, micro_batches: list[Batch], train: TrainSpec) -> Done:
    """Forward and backward over the accumulation micro-batches: each one's loss values and sample count."""
    done: Done = []
    for i, batch in enumerate(micro_batches):
        # Gradients are all-reduced only on the last micro-step; earlier ones accumulate locally.
        last_micro = i == len(micro_batches) - 1
        with nullcontext() if last_micro else c.strategy.no_sync():
            # Divided by k so that k micro-steps sum to the gradient of one step over the whole batch.
            values = c.strategy.forward_backward(
                c.forward, batch, c.objective, c.precision, train.grad_accum_steps
            )
        done.append((values, batch_size(batch)))
    return done


def whole_step(c: Components, micro_batches: list[Batch], train: TrainSpec) -> Done:
    """Forward, backward, clip and update: what a CUDA graph captures (trainers/graphs.py)."""
    done = micro_steps(c, micro_batches, train)
    c.strategy.optimizer_step(c.optimizer, c.precision, train.clip_grad_norm)
    return done


def step_graph(config: RunConfig, c: Components, output: RunOutput) -> StepGraph | None:
    """The captured step performance.cuda_graphs asks for, where this job has one (build made its stream)."""
    spec = config.spec
    if c.capture_stream is None:
        return None
    c.precision.cache_casts = False
    return StepGraph(
        lambda micro_batches: whole_step(c, micro_batches, spec.train),
        c.optimizer,
        c.capture_stream,
        warmup_steps=DDP_WARMUP_STEPS if config.plan.strategy is Strategy.DDP else WARMUP_STEPS,
        decide_by_timing=spec.performance.cuda_graphs is CudaGraphs.AUTO,
        note=output.note_graphs,
        agree=mean_over_ranks(c.strategy),
    )


def train_step(
    c: Components,
    micro_batches: list[Batch],
    train: TrainSpec,
    metrics: TrainMetrics,
    step: int,
    graph: StepGraph | None = None,
) -> None:
    """One optimizer step over the accumulation micro-batches: forward, backward, clip, update, replayed
    from a CUDA graph when the job has one. Under train.on_nonfinite=skip_step, a loss that is not finite on
    any rank skips the update on every rank."""
    replayed = None if graph is None else graph.run(micro_batches, step)
    done = micro_steps(c, micro_batches, train) if replayed is None else replayed
    losses = torch.stack([values.loss.to(metrics.device, torch.float64) for values, _ in done])
    nonfinite = ~torch.isfinite(losses).all()
    metrics.flag(step, nonfinite)
    # A per-step collective and host sync, paid only by those who ask to skip: under ddp every rank holds the
    # bad rank's NaNs in its averaged gradients, so all of them must skip together.
    if train.on_nonfinite is OnNonFinite.SKIP_STEP and any_rank(c.strategy, nonfinite):
        c.optimizer.zero_grad(set_to_none=True)
        return
    for values, samples in done:
        metrics.add(values, samples)
    if replayed is None:
        c.strategy.optimizer_step(c.optimizer, c.precision, train.clip_grad_norm)


def train(config: RunConfig, run_dir: Path, env: DistEnv) -> bool:
    """True when training ran to the end; False when a SIGTERM stopped it after a final checkpoint."""
    spec, plan = config.spec, config.plan
    c = build(config, env)
    done = resume(plan, run_dir, c)
    per_epoch = c.batches.steps_per_epoch
    total = total_steps(spec.train, per_epoch)
    schedule = LrSchedule.from_spec(spec.train, plan.lr, total, per_epoch)
    output = RunOutput(run_dir, spec, total, env.is_main, env.stop)
    metrics = TrainMetrics(
        c.strategy,
        env.device,
        start_step=done,
        window=spec.metrics.every_n_steps,
        counts=c.counts,
        throughput=c.throughput,
    )

    graph = step_graph(config, c, output)
    profiler = StepProfiler(spec.profile, run_dir, env, output.events, done)
    output.running(Position.of(done, per_epoch, total))
    stopping = False
    for step, micro_batches in zip(range(done + 1, total + 1), c.batches.from_step(done), strict=False):
        lr = lr_at(step - 1, schedule, plateau_state(c.optimizer).factor)
        set_lr(c.optimizer, lr)
        train_step(c, micro_batches, spec.train, metrics, step, graph)
        if step == done + 1:
            output.first_step_done()
        profiler.step()

        at = Position.of(step, per_epoch, total)
        if report_due(spec.metrics, at):
            output.report_training(at, metrics.report(step, lr))
        if not c.held_out.empty and evaluation_due(spec.train, at):
            values = evaluate(c, c.batches.per_rank_batch)
            output.report(at, values)
            observe_eval_loss(c.optimizer, spec.train, values["eval_loss"])
        # A SIGTERM (max_runtime, cancel) stops every rank at the same report step, after a final checkpoint.
        stopping = step % spec.metrics.every_n_steps == 0 and not at.last and env.stop.agreed(env.device)
        if checkpoint_due(spec.checkpoint, at) or stopping:
            # Every rank takes part: a sharded strategy gathers the full state here.
            model_state, optimizer_state = c.strategy.full_state(c.optimizer)
            if c.trainable_only:  # resume reads the frozen model from model.path again
                model_state = trainable_state(c.strategy.unwrap(), model_state)
            output.checkpoint(model_state, optimizer_state, c.precision, at)
        if at.epoch_end:
            output.epoch_ended(at)
        if stopping:
            break
    profiler.close()
    if graph is not None:
        graph.release()
    if c.export is not None and not stopping:
        # A collective: every rank gathers, rank 0 writes the merged weights before the run reports done.
        model_state, _ = c.strategy.full_state(c.optimizer)
        if env.is_main:
            c.export(model_state, run_dir)
    # Before teardown: its barrier holds the other ranks until rank 0's last checkpoint is durable.
    output.close(finished=not stopping)
    c.strategy.teardown()
    return not stopping

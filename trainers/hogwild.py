"""Hogwild, the one alternative to trainers/loop.py: the main process (torchrun's only rank) trains nothing
itself. It starts plan.workers CPU processes that train one shared model lock-free, each on its own shard
with its own SGD, and does what the loop's rank 0 does, with the loop's pieces and bookkeeping: reports
metrics (loss averaged over workers, samples/s summed), evaluates, checkpoints and writes events.

A job step is one step of every worker (plan.per_rank_batch samples each: the global batch), so epochs,
total steps, checkpoint and evaluation cadences mean what they mean for ddp.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from jobspec.events import StartupEvent
from jobspec.plan import RunConfig
from jobspec.startup import marks
from trainers.components import Components, build
from trainers.data import TrainBatches
from trainers.data.held_out import ResidentHeldOut
from trainers.dist_env import DistEnv
from trainers.hogwild_worker import METRICS, Crew, WorkerArgs
from trainers.loop import evaluate, resume
from trainers.metrics import Report
from trainers.progress import Position, RunOutput, checkpoint_due, evaluation_due, total_steps

_SUMMED = {"samples_per_s"}  # every worker adds its own
_HIGHEST = {"peak_mem_mb"}


def combine(reports: list[Report]) -> Report:
    """One report from every worker's report of the same step: means, except where a sum or max says more;
    a step whose loss was not finite on any worker counts once."""
    values = {}
    for name in reports[0].values:
        column = [report.values[name] for report in reports]
        if name in _SUMMED:
            values[name] = sum(column)
        elif name in _HIGHEST:
            values[name] = max(column)
        else:
            values[name] = sum(column) / len(column)
    return Report(values, sorted({step for report in reports for step in report.nonfinite_steps}))


def resident(c: Components) -> TrainBatches:
    """Hogwild trains built-in models on built-in data only (user code is refused at submit)."""
    if not isinstance(c.batches, TrainBatches) or not isinstance(c.held_out, ResidentHeldOut):
        raise ValueError("parallel.strategy=hogwild trains a built-in data.dataset only")
    return c.batches


def worker_args(config: RunConfig, c: Components, done: int) -> list[WorkerArgs]:
    workers = config.plan.workers
    feeder = resident(c).feeder
    x, y = feeder.x.share_memory_(), feeder.y.share_memory_()
    return [
        WorkerArgs(
            rank=rank,
            config=config,
            model=c.strategy.unwrap(),
            train=(x, y),
            shape=feeder.view,
            optimizer_state=c.optimizer.state_dict() if done else None,
            done=done,
            evaluates=not c.held_out.empty,
            threads=max(1, torch.get_num_threads() // workers),
            parent=os.getpid(),
        )
        for rank in range(workers)
    ]


def steps_per_epoch(config: RunConfig, c: Components) -> int:
    """A worker's: its shard of the training split in steps of plan.per_rank_batch."""
    plan, env = config.plan, c.strategy.env
    worker = DistEnv(rank=0, local_rank=0, world_size=plan.workers, device=env.device)
    seed = config.spec.train.seed
    return TrainBatches(
        resident(c).feeder, worker, plan.per_rank_batch, plan.micro_batch, seed
    ).steps_per_epoch


def train_hogwild(config: RunConfig, run_dir: Path, env: DistEnv) -> bool:
    """True when training ran to the end; False when a SIGTERM stopped it after a final checkpoint."""
    spec, plan = config.spec, config.plan
    c = build(config, env)
    done = resume(plan, run_dir, c)
    per_epoch = steps_per_epoch(config, c)
    total = total_steps(spec.train, per_epoch)
    output = RunOutput(run_dir, spec, total, env.is_main, env.stop)
    reports: dict[int, list[Report]] = defaultdict(list)
    paused: dict[int, list[dict[str, Any] | None]] = defaultdict(list)
    stop_at = 0

    output.running(Position.of(done, per_epoch, total))
    # This process takes no step of its own: its start-up ends where its workers' training begins.
    output.events.append(StartupEvent(marks=marks()))
    crew = Crew(plan.workers, done)
    try:
        crew.start(worker_args(config, c, done))
        while True:
            if env.stop.requested and not stop_at:
                stop_at = crew.stop_soon(spec.metrics.every_n_steps)
            message = crew.receive()
            if message is None:
                continue
            kind, _, step, payload = message
            at = Position.of(step, per_epoch, total)
            if kind == METRICS:
                reports[step].append(payload)
                if len(reports[step]) == plan.workers:
                    output.report_training(at, combine(reports.pop(step)))
                    if at.epoch_end:
                        output.epoch_ended(at)
                continue
            paused[step].append(payload)
            if len(paused[step]) < plan.workers:
                continue
            # Every worker waits at this step: the shared model holds exactly `step` steps of each.
            if not c.held_out.empty and evaluation_due(spec.train, at):
                output.report(at, evaluate(c, c.batches.per_rank_batch))
            if checkpoint_due(spec.checkpoint, at) or step == stop_at:
                optimizer_state = next(s for s in paused.pop(step) if s is not None)
                model_state, _ = c.strategy.full_state(c.optimizer)
                output.checkpoint(model_state, optimizer_state, c.precision, at)
            if at.epoch_end:
                output.epoch_ended(at)
            crew.release()
            if at.last or step == stop_at:
                break
        crew.join()
    finally:
        crew.kill()
    stopped = stop_at != 0 and stop_at < total
    output.close(finished=not stopped)
    c.strategy.teardown()
    return not stopped

"""One rank's part in a program job: the trainer's own pieces (strategy, precision, metrics, checkpoints, the
stop agreement) arranged around a loop the user writes. `trainers/job/__init__.py` is its public face.

Every collective here (reports, evaluations, stop checks, a sharded checkpoint's gather) happens at a step
every rank computes the same way, as in trainers/loop.py, so no rank waits on one another skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from pydantic import JsonValue
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from jobspec.datadir import RUN_DIR_ENV
from jobspec.events import SPEC_FILE
from jobspec.plan import Plan, RunConfig
from jobspec.spec import JobSpec, Strategy
from trainers.checkpoint import load_checkpoint, restore
from trainers.data.batches import Batch, batch_size, to_device
from trainers.data.loader import ResumableSampler, stop_safe
from trainers.dist_env import DistEnv, rank_env
from trainers.metrics import TrainMetrics
from trainers.objectives import LossValues
from trainers.precision import MixedPrecision
from trainers.progress import Position, RunOutput, checkpoint_due, total_steps
from trainers.strategies import GroupOptions, ParallelStrategy, build_strategy


@dataclass(frozen=True)
class Context:
    """What ty.init() tells the script about its rank and its job."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    is_main: bool  # rank 0: the one that writes events and checkpoints
    hyperparameters: dict[str, JsonValue]
    spec: JobSpec
    plan: Plan
    run_dir: Path  # writable; anything else the script writes is lost or refused
    resume_path: str | None  # the checkpoint ty.restore loads, when there is one


def read_config() -> tuple[RunConfig, Path]:
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir is None:
        raise RuntimeError(
            f"trainyard.job runs inside a Trainyard program job ({RUN_DIR_ENV} is not set); submit the "
            "script with a spec's program.entrypoint"
        )
    path = Path(run_dir)
    return RunConfig.model_validate_json((path / SPEC_FILE).read_text(encoding="utf-8")), path


class Session:
    def __init__(self, config: RunConfig, run_dir: Path, env: DistEnv) -> None:
        spec, plan = config.spec, config.plan
        self.config, self.run_dir, self.env = config, run_dir, env
        # The same seed on every rank: identical initial weights, as for the built-in loop.
        torch.manual_seed(spec.train.seed)
        group = GroupOptions(plan.backend, timedelta(seconds=spec.limits.collective_timeout_s))
        self.strategy: ParallelStrategy = build_strategy(
            plan.strategy, spec.parallel, env, group, plan.precision
        )
        self.strategy.setup_environment()
        self.precision = MixedPrecision(plan.precision, env.device)
        self.output = RunOutput(run_dir, spec, spec.train.max_steps or 0, env.is_main, env.stop)
        self.metrics: TrainMetrics | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.steps_per_epoch = 1
        self.samples = 0  # in the batch ty.steps handed out last: what a report's loss is weighted by
        self.micro_steps = 0
        self.stopped = False
        self.started = False  # ty.steps ran: the run has a last step, which a done event announces

    def context(self) -> Context:
        spec, env = self.config.spec, self.env
        program = spec.program
        return Context(
            rank=env.rank,
            local_rank=env.local_rank,
            world_size=env.world_size,
            device=env.device,
            is_main=env.is_main,
            hyperparameters={} if program is None else dict(program.hyperparameters),
            spec=spec,
            plan=self.config.plan,
            run_dir=self.run_dir,
            resume_path=self.config.plan.resume_path,
        )

    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[Any, torch.optim.Optimizer]:
        forward: Any = self.strategy.setup_module(model)
        if self.config.spec.performance.compile:
            forward = self.strategy.compiled(forward)
        if self.config.plan.strategy is Strategy.FSDP:
            # fully_shard puts sharded parameters in place of the module's own: the optimizer must hold those.
            optimizer = type(optimizer)(self.strategy.unwrap().parameters(), **optimizer.defaults)
        self.optimizer = optimizer
        self._window_from(0)
        return forward, optimizer

    def _window_from(self, step: int) -> None:
        """Metrics summed from the step after `step`: a fresh start, a checkpoint's, ty.steps' start."""
        every = self.config.spec.metrics.every_n_steps
        self.metrics = TrainMetrics(self.strategy, self.env.device, start_step=step, window=every)

    def data_loader(self, dataset: Dataset[Any], batch_size: int, **options: Any) -> DataLoader[Any]:
        env, seed = self.strategy.data_env, self.config.spec.train.seed
        sampler: DistributedSampler[Any] = DistributedSampler(
            dataset, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=seed, drop_last=True
        )
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=ResumableSampler(sampler),
            drop_last=True,
            pin_memory=self.env.device.type == "cuda",
            **stop_safe(options),
        )

    def restore(self) -> int:
        """Steps done by the checkpoint the job resumes from (0 without one), loaded into what prepare set."""
        path = self.config.plan.resume_path
        if path is None:
            return 0
        # A relative path is taken from the run directory; an absolute one (an earlier attempt's) wins.
        state = load_checkpoint(self.run_dir / path, self.env.device)
        done = restore(state, self.strategy, self._prepared(), self.precision)
        self._window_from(done)
        print(f"resumed from {path} after step {done}", flush=True)
        return done

    def steps(self, loader: DataLoader[Any], start: int) -> Iterator[tuple[int, Batch]]:
        """(step, batch on the device) from the step after `start` to train.max_steps (or train.epochs of
        the loader); on a SIGTERM every rank stops at the same report step after a final checkpoint."""
        train, every = self.config.spec.train, self.config.spec.metrics.every_n_steps
        per_epoch = len(loader)
        if per_epoch == 0:
            raise ValueError(
                "ty.steps got a loader with no batches: each rank needs at least one batch a step"
            )
        total = total_steps(train, per_epoch)
        self.steps_per_epoch, self.output.total = per_epoch, total
        self._window_from(start)
        self.started = True
        step = start
        sampler = loader.sampler
        while step < total:
            epoch, skip = divmod(step, per_epoch)
            if isinstance(sampler, ResumableSampler):
                sampler.start(epoch, skip * (loader.batch_size or 1))
            for batch in loader:
                step += 1
                self.samples = batch_size(batch)
                yield step, to_device(batch, self.env.device, non_blocking=True)
                if step % every == 0 and step < total and self.should_stop():
                    self.save(step)
                    return
                if step >= total:
                    return

    def position(self, step: int) -> Position:
        return Position.of(step, self.steps_per_epoch, self.output.total)

    def backward(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> bool:
        """Accumulates over train.grad_accum_steps calls, then clips and steps; True when it stepped."""
        train = self.config.spec.train
        self.strategy.backward(self.precision.scale(loss / train.grad_accum_steps))
        self.micro_steps += 1
        if self.micro_steps % train.grad_accum_steps:
            return False
        self.strategy.optimizer_step(optimizer, self.precision, train.clip_grad_norm)
        if self.micro_steps == train.grad_accum_steps:
            self.output.first_step_done()
        return True

    def report(self, step: int, loss: torch.Tensor | float, metrics: dict[str, torch.Tensor | float]) -> None:
        if self.metrics is None:
            raise RuntimeError("call ty.prepare(model, optimizer) before ty.report")
        device = self.env.device
        values = LossValues(
            torch.as_tensor(loss, device=device).detach(),
            {name: torch.as_tensor(value, device=device).detach() for name, value in metrics.items()},
        )
        self.metrics.add(values, self.samples or 1)
        at = self.position(step)
        if step % self.config.spec.metrics.every_n_steps == 0 or at.last:
            lr = self._prepared().param_groups[0]["lr"]
            self.output.report_training(at, self.metrics.report(step, float(lr)))

    def report_eval(self, step: int, values: dict[str, float]) -> None:
        """The mean over ranks of each value, named eval_<name>: a collective."""
        names = sorted(values)
        sums = torch.tensor(
            [float(values[name]) for name in names], dtype=torch.float64, device=self.env.device
        )
        means = (self.strategy.reduce_metrics(sums) / self.env.world_size).tolist()
        named = {
            name if name.startswith("eval_") else f"eval_{name}": v
            for name, v in zip(names, means, strict=True)
        }
        self.output.report(self.position(step), named)

    def checkpoint_due(self, step: int) -> bool:
        return checkpoint_due(self.config.spec.checkpoint, self.position(step))

    def save(self, step: int) -> None:
        """Every rank calls it (a sharded model is gathered); rank 0 writes in the background."""
        model_state, optimizer_state = self.strategy.full_state(self._prepared())
        self.output.checkpoint(model_state, optimizer_state, self.precision, self.position(step))

    def should_stop(self) -> bool:
        """Whether any rank was asked to stop (cancel, max_runtime): a collective, so all call it at once."""
        self.stopped = self.env.stop.agreed(self.env.device)
        return self.stopped

    def autocast(self) -> AbstractContextManager[Any]:
        return self.precision.autocast()

    def finish(self) -> bool:
        """After the script: the last checkpoint durable, the ranks' group left. True unless it stopped."""
        self.output.close(finished=self.started and not self.stopped)
        self.strategy.teardown()
        return not self.stopped

    def _prepared(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise RuntimeError("call ty.prepare(model, optimizer) first")
        return self.optimizer


def start_session() -> Session:
    config, run_dir = read_config()
    return Session(config, run_dir, rank_env(config.plan))

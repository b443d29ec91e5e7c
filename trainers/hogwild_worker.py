"""Hogwild workers: CPU processes that train one model in shared memory, lock-free, each on its own shard.

The main process starts them (spawn: a fresh interpreter, so no OpenMP or gloo state is inherited from the
parent) and hears from them over one queue. Between sync points they never wait for one another. At a sync
point (an evaluation, a checkpoint, the last step, or a requested stop) every worker stops at the same step
and waits on a barrier, so the main process sees a model no one is writing while it evaluates and saves.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.context import SpawnProcess
from multiprocessing.sharedctypes import Synchronized, SynchronizedArray
from multiprocessing.synchronize import Barrier
from typing import Any

import torch
import torch.multiprocessing as mp
from torch import nn

from jobspec.plan import RunConfig
from trainers.components import Components
from trainers.data import DeviceFeeder, Pair, TrainBatches, View
from trainers.data.held_out import ResidentHeldOut
from trainers.dist_env import DistEnv
from trainers.loop import train_step
from trainers.metrics import TrainMetrics
from trainers.objectives import build_objective
from trainers.precision import MixedPrecision
from trainers.progress import Position, checkpoint_due, evaluation_due, report_due, total_steps
from trainers.schedule import LrSchedule, lr_at, set_lr
from trainers.strategies.single import SingleDeviceStrategy

CPU = torch.device("cpu")
# Messages on the queue: (kind, worker, step, payload).
METRICS, PAUSED, FAILED = "metrics", "paused", "failed"
Message = tuple[str, int, int, Any]
_PR_SET_PDEATHSIG = 1


@dataclass
class WorkerArgs:
    rank: int
    config: RunConfig
    model: nn.Module  # parameters in shared memory
    train: Pair  # the whole training split, in shared memory; each worker reads its own shard
    shape: View  # how batches are shaped (hogwild refuses data.augment)
    optimizer_state: dict[str, Any] | None  # what the run resumed from
    done: int  # steps done before this run
    evaluates: bool  # whether the main process evaluates (held-out data exists)
    threads: int
    parent: int


@dataclass
class Shared:
    """What main and workers share besides the model."""

    messages: Any  # a torch.multiprocessing Queue of Message
    barrier: Barrier  # workers + main
    claimed: SynchronizedArray[int]  # the step each worker is on; its lock orders claims against stop_at
    stop_at: Synchronized[int]  # 0, or the step at which every worker stops (a SIGTERM reached main)


def die_with_parent(parent: int) -> None:
    """A worker must not outlive the main process, even one killed with SIGKILL."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def sync_due(args: WorkerArgs, at: Position) -> bool:
    spec = args.config.spec
    evaluation = args.evaluates and evaluation_due(spec.train, at)
    return evaluation or checkpoint_due(spec.checkpoint, at) or at.last


def claim(step: int, args: WorkerArgs, shared: Shared) -> None:
    with shared.claimed.get_lock():
        shared.claimed[args.rank] = step


def components(args: WorkerArgs) -> Components:
    spec, plan = args.config.spec, args.config.plan
    env = DistEnv(rank=args.rank, local_rank=args.rank, world_size=plan.workers, device=CPU)
    strategy = SingleDeviceStrategy(env)
    forward = strategy.setup_module(args.model)
    optimizer = strategy.setup_optimizer(spec.train, plan.lr)
    if args.optimizer_state is not None:
        optimizer.load_state_dict(args.optimizer_state)
    feeder = DeviceFeeder(args.train, args.shape, CPU, CPU)
    x, y = args.train
    return Components(
        strategy=strategy,
        forward=forward,
        optimizer=optimizer,
        precision=MixedPrecision(plan.precision, CPU),
        objective=build_objective(spec.train.loss, None),  # user losses are refused for hogwild at submit
        batches=TrainBatches(feeder, env, plan.per_rank_batch, plan.micro_batch, spec.train.seed),
        held_out=ResidentHeldOut(DeviceFeeder((x[:0], y[:0]), args.shape, CPU, CPU)),  # main evaluates
    )


def train_worker(args: WorkerArgs, shared: Shared) -> None:
    spec, plan = args.config.spec, args.config.plan
    torch.set_num_threads(args.threads)
    # Each worker its own random stream (dropout), all of them reproducible from the seed.
    torch.manual_seed(spec.train.seed + args.rank)
    c = components(args)
    per_epoch = c.batches.steps_per_epoch
    total = total_steps(spec.train, per_epoch)
    schedule = LrSchedule.from_spec(spec.train, plan.lr, total, per_epoch)
    metrics = TrainMetrics(c.strategy, CPU, start_step=args.done, window=spec.metrics.every_n_steps)
    steps = zip(range(args.done + 1, total + 1), c.batches.from_step(args.done), strict=False)
    for step, micro_batches in steps:
        claim(step, args, shared)
        # No plateau factor: evaluations happen in the main process, so plateau is refused for hogwild at
        # submit (jobspec/combinations.py), as are the loop's TensorBoard, profiler and compile.
        lr = lr_at(step - 1, schedule)
        set_lr(c.optimizer, lr)
        train_step(c, micro_batches, spec.train, metrics, step)
        at = Position.of(step, per_epoch, total)
        if report_due(spec.metrics, at):
            shared.messages.put((METRICS, args.rank, step, metrics.report(step, lr)))
        stopping = step == shared.stop_at.value
        if sync_due(args, at) or stopping:
            # Worker 0's optimizer state stands for all of them in a checkpoint; they train alike.
            state = c.optimizer.state_dict() if args.rank == 0 else None
            shared.messages.put((PAUSED, args.rank, step, state))
            shared.barrier.wait()
        if stopping:
            return


def work(args: WorkerArgs, shared: Shared) -> None:
    """The worker process: failures go to the main process as text, which it raises as the job's error."""
    die_with_parent(args.parent)
    # A SIGTERM (cancel, max_runtime) reaches every process of the job; the main process decides the step
    # at which all workers stop together after a checkpoint, and SIGKILL after the grace period still works.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        train_worker(args, shared)
    except BaseException:
        shared.messages.put((FAILED, args.rank, 0, traceback.format_exc()))
        raise


class Crew:
    """The worker processes, seen from the main process."""

    def __init__(self, workers: int, done: int) -> None:
        self.context = mp.get_context("spawn")
        self.shared = Shared(
            messages=self.context.Queue(),
            barrier=self.context.Barrier(workers + 1),
            claimed=self.context.Array("q", [done] * workers),
            stop_at=self.context.Value("q", 0),
        )
        self.processes: list[SpawnProcess] = []

    def start(self, args: list[WorkerArgs]) -> None:
        for worker in args:
            name = f"hogwild-{worker.rank}"
            process = self.context.Process(target=work, args=(worker, self.shared), name=name)
            process.start()
            self.processes.append(process)

    def receive(self) -> Message | None:
        """The next message, or None after a second without one; raises when a worker has failed."""
        try:
            message: Message = self.shared.messages.get(timeout=1.0)
        except queue.Empty:
            self._check_alive()
            return None
        if message[0] == FAILED:
            raise RuntimeError(f"hogwild worker {message[1]} failed:\n{message[3]}")
        return message

    def _check_alive(self) -> None:
        for rank, process in enumerate(self.processes):
            if process.exitcode is not None and process.exitcode != 0:
                raise RuntimeError(f"hogwild worker {rank} exited with code {process.exitcode}")

    def stop_soon(self, every_n_steps: int) -> int:
        """Pick a report step no worker has reached yet, at which all stop; returns it."""
        with self.shared.claimed.get_lock():
            furthest = max(self.shared.claimed[:])
            step = (furthest // every_n_steps + 1) * every_n_steps
            self.shared.stop_at.value = step
        return step

    def release(self) -> None:
        """Let the workers, all waiting at a sync point, go on."""
        self.shared.barrier.wait()

    def join(self) -> None:
        for process in self.processes:
            process.join()
        self._check_alive()

    def kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
            process.join()

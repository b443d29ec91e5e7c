"""Where a run stands, and what it leaves behind for the worker: the bookkeeping both training loops share.

Every strategy runs trainers/loop.py except hogwild, whose main process drives worker processes instead
(trainers/hogwild.py): the one alternative loop. Both count steps, follow the same cadences and report
through a RunOutput, so a job reads the same to the worker and the API whichever loop ran it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from jobspec.events import DoneEvent, MetricsEvent, PhaseEvent, StartupEvent, WarningEvent
from jobspec.spec import CheckpointSpec, JobSpec, MetricsSpec, OnNonFinite, TrainSpec
from jobspec.startup import Mark, mark, marks
from trainers.checkpoint import Checkpointer
from trainers.dist_env import StopRequest
from trainers.metrics import EventLog, Report
from trainers.precision import MixedPrecision
from trainers.pruner_wait import GateWait
from trainers.tensorboard import TensorBoard

NONFINITE_METRIC = "nonfinite_steps"  # per report, unless train.on_nonfinite=fail


class NonFiniteLoss(Exception):
    """The training loss was not finite under train.on_nonfinite=fail. The worker knows it by its name in
    torchrun's error file (worker/failure.py), and fails the job with reason nonfinite_loss."""

    def __init__(self, step: int) -> None:
        super().__init__(
            f"the training loss was not finite (NaN or inf) at step {step}; lower train.lr, set "
            "train.clip_grad_norm, look for NaNs in the data, or set train.on_nonfinite to warn or skip_step"
        )


@dataclass(frozen=True)
class Position:
    step: int  # optimizer steps done, counting this one
    epoch: int  # 1-based epoch this step belongs to
    epoch_end: bool
    last: bool

    @classmethod
    def of(cls, step: int, steps_per_epoch: int, total: int) -> Position:
        return cls(step, (step - 1) // steps_per_epoch + 1, step % steps_per_epoch == 0, step == total)


def total_steps(train: TrainSpec, steps_per_epoch: int) -> int:
    return train.max_steps or (train.epochs or 1) * steps_per_epoch


def report_due(metrics: MetricsSpec, at: Position) -> bool:
    """Every every_n_steps steps, and at the last step so that a run always ends with its final numbers."""
    return at.step % metrics.every_n_steps == 0 or at.last


def evaluation_due(train: TrainSpec, at: Position) -> bool:
    """At the end of every eval_every_epochs epochs, and once more at the end unless that just happened."""
    if train.eval_every_epochs == 0:
        return False
    return at.last or (at.epoch_end and at.epoch % train.eval_every_epochs == 0)


def checkpoint_due(ckpt: CheckpointSpec, at: Position) -> bool:
    by_step = ckpt.every_n_steps > 0 and at.step % ckpt.every_n_steps == 0
    by_epoch = at.epoch_end and ckpt.every_n_epochs > 0 and at.epoch % ckpt.every_n_epochs == 0
    return by_step or by_epoch or (at.last and ckpt.save_final)


class RunOutput:
    """What a run leaves in its directory: events, checkpoints, TensorBoard scalars, and a line per training
    report in the rank's log. Every rank holds one so that callers need no rank checks; only rank 0's
    writes."""

    def __init__(
        self, run_dir: Path, spec: JobSpec, total: int, is_main: bool, stop: StopRequest | None = None
    ) -> None:
        self.total = total
        self.is_main = is_main
        self.events = EventLog(run_dir, is_main)
        self._gate = GateWait(run_dir, is_main, stop)  # a sweep's trial waits for its pruner's verdict
        self._checkpointer = Checkpointer(run_dir, spec.checkpoint.keep_last, spec.name, self.events)
        self._board = TensorBoard(run_dir, spec.metrics.tensorboard and is_main)
        self.on_nonfinite = spec.train.on_nonfinite
        self._warned = False  # of a non-finite loss: once a run, not at every report
        # (epoch, when) of the last epoch boundary this process saw; an epoch is timed only from its start.
        self._boundary: tuple[int, float] | None = None

    def running(self, done: Position) -> None:
        """Set-up is over; the step after `done` comes next (Position.of(0, ...) for a new run). A run resumed
        mid-epoch saw only part of that epoch, so its time is not reported."""
        phase = PhaseEvent(phase="running")
        mark(Mark.FIRST_STEP, phase.time)
        self.events.append(phase)
        if done.epoch_end:
            self._boundary = (done.epoch, time.monotonic())

    def first_step_done(self) -> None:
        """After the attempt's first optimizer step: the start-up's marks, for the worker to store."""
        if not self.is_main:
            return
        if torch.cuda.is_initialized():
            # Once an attempt: the step is done when its kernels are, compilation and autotuning included.
            torch.cuda.synchronize()
        mark(Mark.FIRST_STEP_DONE)
        self.events.append(StartupEvent(marks=marks()))

    def report(self, at: Position, values: dict[str, float]) -> None:
        """Metrics reduced over the job (training or evaluation) as of `at`."""
        self.events.append(MetricsEvent(step=at.step, total_steps=self.total, epoch=at.epoch, values=values))
        self._board.add(at.step, values)
        self._gate.after_report(at.step, values)

    def report_training(self, at: Position, report: Report) -> None:
        """Also a line in the log, where a user reading it sees the run move. Steps whose loss was not finite
        fail the run, or are counted in nonfinite_steps and warned of, as train.on_nonfinite says; every rank
        holds the same report, so under fail every rank stops at once."""
        values = report.values
        if report.nonfinite_steps:
            self._nonfinite(report.nonfinite_steps[0])
        if self.on_nonfinite is not OnNonFinite.FAIL:
            values = {**values, NONFINITE_METRIC: float(len(report.nonfinite_steps))}
        self.report(at, values)
        if self.is_main:
            print(f"step {at.step}/{self.total} " + " ".join(f"{k}={v:.5g}" for k, v in values.items()))

    def _nonfinite(self, first: int) -> None:
        if self.on_nonfinite is OnNonFinite.FAIL:
            raise NonFiniteLoss(first)
        if self._warned:
            return
        self._warned = True
        then = "training went on" if self.on_nonfinite is OnNonFinite.WARN else "its update was skipped"
        message = (
            f"the training loss was not finite at step {first}; {then} (train.on_nonfinite="
            f"{self.on_nonfinite}), as at every such step: the metric {NONFINITE_METRIC} counts them"
        )
        self.events.append(WarningEvent(step=first, reason="nonfinite_loss", message=message))

    def note_graphs(self, step: int, message: str) -> None:
        """What performance.cuda_graphs=auto decided, in the rank's log and the job's events."""
        if self.is_main:
            print(message, flush=True)
            self.events.append(WarningEvent(step=step, reason="cuda_graphs", message=message))

    def epoch_ended(self, at: Position) -> None:
        """After an epoch's last step (and its evaluation and checkpoint): epoch_time_s, the wall time since
        the epoch began, when this process saw it begin. Hogwild's main process may say so twice for one
        step (its workers report, then pause); the first call counts."""
        if not self.is_main or (self._boundary is not None and self._boundary[0] >= at.epoch):
            return
        if torch.cuda.is_initialized():
            # Once an epoch: the clock must not stop while the epoch's kernels are still queued.
            torch.cuda.synchronize()
        now = time.monotonic()
        if self._boundary is not None and self._boundary[0] == at.epoch - 1:
            self.report(at, {"epoch_time_s": now - self._boundary[1]})
        self._boundary = (at.epoch, now)

    def checkpoint(
        self,
        model_state: dict[str, torch.Tensor],
        optimizer_state: dict[str, Any],
        precision: MixedPrecision,
        at: Position,
    ) -> None:
        """The states as ParallelStrategy.full_state gives them; written in the background, by rank 0."""
        if self.is_main:
            self._checkpointer.save(model_state, optimizer_state, precision, at.step, at.epoch)

    def close(self, finished: bool) -> None:
        """finished: training ran to its last step (not stopped by a SIGTERM), which the done event says.
        The last checkpoint is durable before then: the worker may act on done at once."""
        self._board.close()
        self._checkpointer.wait()
        if finished:
            self.events.append(DoneEvent(step=self.total))

"""Where a run stands, and what it leaves behind for the worker: the bookkeeping both training loops share.

Every strategy runs trainers/loop.py except hogwild, whose main process drives worker processes instead
(trainers/hogwild.py): the one alternative loop. Both count steps, follow the same cadences and report
through a RunOutput, so a job reads the same to the worker and the API whichever loop ran it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainers.checkpoint import Checkpointer
from trainers.events import DoneEvent, MetricsEvent, PhaseEvent
from trainers.metrics import EventLog
from trainers.precision import MixedPrecision
from trainers.spec import CheckpointSpec, JobSpec, MetricsSpec, TrainSpec
from trainers.tensorboard import TensorBoard


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

    def __init__(self, run_dir: Path, spec: JobSpec, total: int, is_main: bool) -> None:
        self.total = total
        self.is_main = is_main
        self.events = EventLog(run_dir, is_main)
        self._checkpointer = Checkpointer(run_dir, spec.checkpoint.keep_last, spec.name, self.events)
        self._board = TensorBoard(run_dir, spec.metrics.tensorboard and is_main)

    def running(self) -> None:
        """Set-up is over; the first step comes next."""
        self.events.append(PhaseEvent(phase="running"))

    def report(self, at: Position, values: dict[str, float]) -> None:
        """Metrics reduced over the job (training or evaluation) as of `at`."""
        self.events.append(MetricsEvent(step=at.step, total_steps=self.total, epoch=at.epoch, values=values))
        self._board.add(at.step, values)

    def report_training(self, at: Position, values: dict[str, float]) -> None:
        """Also a line in the log, where a user reading it sees the run move."""
        self.report(at, values)
        if self.is_main:
            print(f"step {at.step}/{self.total} " + " ".join(f"{k}={v:.5g}" for k, v in values.items()))

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

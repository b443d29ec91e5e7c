"""A Hugging Face `TrainerCallback` that reports a Trainer's run to its Trainyard job:

    from trainyard.hf import TrainyardCallback
    callback = TrainyardCallback()
    trainer = Trainer(model, args, train_dataset=..., callbacks=[callback])
    trainer.train(resume_from_checkpoint=callback.resume_from_checkpoint())

Metrics from on_log (the Trainer has averaged them over its ranks), each checkpoint folder the Trainer saves
into the job's checkpoint list, and should_training_stop once the job is cancelled or out of time, at a
report step every rank agrees on, after a last save. The Trainer keeps its own parallelism (its DDP or FSDP
through accelerate) and its TrainingArguments; the spec's train.max_steps and metrics.every_n_steps are
for the script to pass on (ctx.spec in TrainyardCallback.job.config).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from trainers.job.framework import FrameworkJob


class TrainyardCallback(TrainerCallback):
    def __init__(self) -> None:
        self.job = FrameworkJob()

    def resume_from_checkpoint(self) -> str | None:
        """The folder to pass to trainer.train(resume_from_checkpoint=...): the job's latest checkpoint (or
        checkpoint.resume_from) unpacked, or None for a fresh start."""
        folder = self.job.resume_from()
        return None if folder is None else str(folder)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        numbers = {
            k: float(v) for k, v in (logs or {}).items() if isinstance(v, int | float) and k != "epoch"
        }
        if numbers and state.is_world_process_zero:
            self.job.report(state.global_step, math.ceil(state.epoch or 1), numbers)

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        folder = Path(args.output_dir or ".") / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            self.job.checkpoint(state.global_step, math.ceil(state.epoch or 1), folder)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # Every rank reaches the same global steps: the agreement's collective is taken at each report step.
        if state.global_step % self.job.every_n_steps == 0 and self.job.should_stop(args.device):
            control.should_save = True
            control.should_training_stop = True

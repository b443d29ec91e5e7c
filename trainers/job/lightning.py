"""A Lightning `Callback` that reports a Lightning Trainer's run to its Trainyard job:

    from trainyard.lightning import TrainyardCallback
    callback = TrainyardCallback()
    trainer = lightning.Trainer(max_steps=..., callbacks=[callback])
    trainer.fit(module, loader, ckpt_path=callback.resume_from_checkpoint())

Every metrics.every_n_steps optimizer steps: the values the module logged (self.log; sync_dist=True averages
them over ranks) as the job's metrics, and the stop agreement (cancel, max_runtime), after which the trainer
stops at that step with a last checkpoint. Every checkpoint.every_n_steps the trainer's own checkpoint
(trainer.save_checkpoint, every rank taking part) goes into the job's checkpoint list. Lightning keeps its own
strategy and precision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from trainers.job.framework import FrameworkJob


class TrainyardCallback(pl.Callback):
    def __init__(self) -> None:
        self.job = FrameworkJob()

    def resume_from_checkpoint(self) -> str | None:
        """The .ckpt to pass to trainer.fit(ckpt_path=...): the job's latest checkpoint (or
        checkpoint.resume_from) unpacked, or None for a fresh start."""
        path = self.job.resume_from()
        return None if path is None else str(path)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step, epoch = trainer.global_step, trainer.current_epoch + 1
        report = step % self.job.every_n_steps == 0
        if report and trainer.is_global_zero:
            logged = trainer.callback_metrics.items()
            self.job.report(step, epoch, {name: float(value) for name, value in logged if value.numel() == 1})
        stopping = report and self.job.should_stop(pl_module.device)
        every = self.job.config.spec.checkpoint.every_n_steps
        if stopping or (every and step % every == 0) or step == self.job.total:
            self._save(trainer, step, epoch)
        if stopping:
            trainer.should_stop = True

    def _save(self, trainer: pl.Trainer, step: int, epoch: int) -> None:
        # A collective under sharded strategies: every rank calls it, the trainer's rank 0 writes the file.
        path = Path(self.job.run_dir) / "lightning" / f"step-{step:08d}.ckpt"
        trainer.save_checkpoint(path)
        self.job.checkpoint(step, epoch, path)
        if trainer.is_global_zero:
            path.unlink()  # packed into the job's checkpoint

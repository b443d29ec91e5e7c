"""TensorBoard event files under runs/<job>/tensorboard/, holding the scalars rank 0 reports as events.

tensorboard is imported only when a job asks for it, so jobs without metrics.tensorboard never need it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jobspec.events import TENSORBOARD_DIR

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class TensorBoard:
    """Every rank holds one so the loop needs no rank checks; only an enabled one (rank 0's) writes."""

    def __init__(self, run_dir: Path, enabled: bool) -> None:
        self._writer: SummaryWriter | None = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR))

    def add(self, step: int, values: dict[str, float]) -> None:
        if self._writer is None:
            return
        for name, value in values.items():
            self._writer.add_scalar(name, value, global_step=step)
        # Flushed per report, so a running job's curves show up in TensorBoard as they grow.
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

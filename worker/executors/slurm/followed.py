"""An attempt Slurm runs, as the worker follows it (worker/attempts/watch.py's RunningAttempt): its state
is what this tick's `scontrol` said of its Slurm job, and Slurm's commands stop and restart it."""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from core.states import JobStatus
from worker.attempts.ends import Outcome
from worker.attempts.events import AttemptEvents
from worker.attempts.stack_capture import RankPid
from worker.executors.slurm import commands, endings, outcomes
from worker.executors.slurm.commands import SlurmJob

log = logging.getLogger(__name__)


@dataclass
class Followed:
    job_id: int
    slurm_id: int
    attempt: int
    restarts: int  # Slurm's restart count this attempt runs as
    run_dir: Path
    batch_log: Path  # where a node's task writes its own errors (node.py)
    events: AttemptEvents
    uploads: ExitStack  # the attempt's uploads, closed when it ends (worker/uploads.py)
    started_at: datetime | None
    max_runtime_s: int | None
    max_restarts: int
    slurm: SlurmJob | None  # its Slurm job as this tick's scontrol read it; None once Slurm forgot it
    stopping: Outcome | None = None  # asked to stop (cancel, time limit, pruned): how it then ends
    stop_sent: float = 0.0  # monotonic time of the SIGTERM
    killed: bool = False
    secret_values: tuple[str, ...] = ()  # none: a spec that names a secret is refused under Slurm

    def ended(self) -> Outcome | None:
        """How its Slurm job ended, as scontrol says; None while it runs (or waits to run again: a requeue,
        which the follower reads first)."""
        if self.slurm is None:
            return Outcome(JobStatus.FAILED, "slurm_lost", f"Slurm job {self.slurm_id} is gone")
        if self.slurm.state not in outcomes.ENDED:
            return None
        # One Trainyard asked to stop ends as asked, whatever Slurm's record says of its ranks.
        return self.stopping or outcomes.ended(self.slurm, self.run_dir, self.batch_log)

    def stop(self, outcome: Outcome) -> None:
        """SIGTERM to its steps, whose ranks then save a final checkpoint; kill_after() ends what is left."""
        commands.signal_steps(self.slurm_id, "TERM")
        self.stopping = outcome
        self.stop_sent = time.monotonic()
        log.info("job %s: SIGTERM to Slurm job %s (%s)", self.job_id, self.slurm_id, outcome.reason)

    def kill_after(self, grace_s: float) -> None:
        """Once `grace_s` has passed since stop(), Slurm kills what is left (scancel)."""
        if not self.killed and time.monotonic() - self.stop_sent > grace_s:
            commands.cancel(self.slurm_id)
            self.killed = True

    def restart(self, outcome: Outcome) -> bool:
        return endings.restart(self.job_id, self.slurm_id, self.max_restarts, outcome)

    def signal_ranks(self, ranks: dict[int, RankPid]) -> list[int]:
        """None: the ranks run on Slurm's nodes, out of this worker's reach (a stall is still told, from the
        step counter, and ends the job; docs/reliability.md)."""
        return []

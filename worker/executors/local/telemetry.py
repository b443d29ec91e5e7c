"""What a job's heartbeat records after renewing the lease: its owner's fair-share use (core/usage.py)
and, every telemetry_every_beats beats, its GPUs' telemetry as metric rows, with a warning when they idle.

Each node's heartbeat charges its own GPUs (or CPU cores) for the time since its own last beat, so the nodes
of a job, on any number of workers, never charge one stretch twice; a worker that dies loses at most one
beat's worth, and the next attempt's heartbeat starts afresh."""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import fmean

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.config import Settings
from core.db import session_scope
from core.gpu_series import GpuQuantity, series_name
from core.models import Job, JobNode, Metric, UserUsage, utcnow
from core.upsert import insert_ignoring_duplicates, insert_or_update
from core.usage import NO_USE, Use, share_key, use_now
from jobspec.plan import Plan
from worker.executors.local.nodes import NodeTask
from worker.gpus import sample_gpus
from worker.tail import note

log = logging.getLogger(__name__)

GPU_IDLE = "gpu_idle"

Samples = dict[int, dict[GpuQuantity, float]]


@dataclass
class JobMeter:
    """One node of one attempt. `_record` writes without changing the meter; `_recorded`, once that
    committed, moves it on, so a failed beat's stretch is charged by the next one."""

    node: NodeTask
    settings: Settings
    since: datetime = field(default_factory=utcnow)
    beats: int = 0
    gpu_ids: list[int] = field(default_factory=list)  # the node's leased GPUs, known after the first beat
    utilisation: dict[int, deque[tuple[datetime, float]]] = field(default_factory=dict)
    first_sample: datetime | None = None

    def beat(self, now: datetime) -> None:
        """After a committed heartbeat, in a transaction of its own: metering that fails must never cost the
        job its lease. NVML is read first (milliseconds), before the transaction holds any lock."""
        try:
            samples = self._sample()
            with session_scope() as session:
                self._record(session, now, samples)
            self._recorded(now, samples)
        except Exception:  # a locked database, a plan it cannot read: the next beat charges this stretch too
            log.exception("job %s: metering failed", self.node.job_id)

    def _sample(self) -> Samples:
        """Every telemetry_every_beats beats, else nothing."""
        if not self.gpu_ids or (self.beats + 1) % self.settings.telemetry_every_beats:
            return {}
        return sample_gpus(self.gpu_ids)

    def _record(self, session: Session, now: datetime, samples: Samples) -> None:
        """Charge the owner for the stretch since the last recorded beat, store the samples at the job's
        step, and warn of GPUs that idle."""
        row = session.execute(
            select(Job.owner, Job.progress_step, Job.plan, JobNode.gpu_ids)
            .join(JobNode, JobNode.job_id == Job.id)
            .where(
                Job.id == self.node.job_id,
                JobNode.node_rank == self.node.node_rank,
                JobNode.attempt == self.node.attempt,
            )
        ).one_or_none()
        if row is None:
            return
        owner, step, plan, gpu_ids = row
        self.gpu_ids = list(gpu_ids)
        seconds = max((now - self.since).total_seconds(), 0.0)
        cores = Plan.model_validate(plan).cpu_cores  # as placement counts them: 0 for a GPU job
        charge(session, owner, seconds * len(gpu_ids), seconds * cores, now, self.settings)
        for gpu, values in samples.items():
            for quantity, value in values.items():
                metric = {"job_id": self.node.job_id, "name": series_name(quantity, self._label(gpu))}
                # One point per step: a later sample at the same step replaces the earlier one.
                row_values = {**metric, "step": step, "value": value, "epoch": 0, "at": now}
                insert_or_update(session, Metric, row_values, keys=["job_id", "name", "step"])
        idle = self._idle(now, samples)
        if idle:
            note(session, self.node.job_id, GPU_IDLE, idle)

    def _recorded(self, now: datetime, samples: Samples) -> None:
        self.since = now
        self.beats += 1
        if samples and self.first_sample is None:
            self.first_sample = now
        for gpu, values in samples.items():
            self.utilisation.setdefault(gpu, deque()).append((now, values[GpuQuantity.UTIL]))
        horizon = now - timedelta(seconds=self.settings.gpu_idle_after_s)
        for window in self.utilisation.values():
            while window and window[0][0] < horizon:
                window.popleft()

    def _idle(self, now: datetime, samples: Samples) -> str | None:
        """'GPU 1 averaged 3 % utilisation over 10 min' for each GPU whose samples over the last
        gpu_idle_after_s (this one included) average below gpu_idle_pct; None until that long was sampled."""
        span = timedelta(seconds=self.settings.gpu_idle_after_s)
        if not samples or self.first_sample is None or now - self.first_sample < span:
            return None
        horizon = now - span
        idle = []
        for gpu, values in sorted(samples.items()):
            kept = [util for at, util in self.utilisation.get(gpu, ()) if at >= horizon]
            mean = fmean([*kept, values[GpuQuantity.UTIL]])
            if mean < self.settings.gpu_idle_pct:
                idle.append(f"GPU {self._label(gpu)} averaged {mean:.0f} % utilisation over {_span(span)}")
        return "; ".join(idle) or None

    def _label(self, gpu: int) -> str:
        # Every host numbers its GPUs from 0: another node's GPUs are told apart by their node.
        return str(gpu) if self.node.node_rank == 0 else f"n{self.node.node_rank}.{gpu}"


def _span(span: timedelta) -> str:
    minutes = span.total_seconds() / 60
    return f"{minutes:g} min" if minutes >= 1 else f"{span.total_seconds():g} s"


def charge(
    session: Session,
    owner: str,
    gpu_seconds: float,
    cpu_core_seconds: float,
    now: datetime,
    settings: Settings,
) -> None:
    """Add a stretch of one job's use to what is left of its owner's. The row is made if missing and then
    locked for the rest of the transaction (SQLite: the beat's write already holds the database), so the
    heartbeats of several jobs of one user, on any worker, each add theirs."""
    empty = {"owner": owner, "gpu_seconds": 0.0, "cpu_core_seconds": 0.0, "as_of": now, "share_key": NO_USE}
    insert_ignoring_duplicates(session, UserUsage, [empty])
    row = session.get_one(UserUsage, owner, with_for_update=True, populate_existing=True)
    before = use_now(row, now, settings)
    after = Use(before.gpu_seconds + gpu_seconds, before.cpu_core_seconds + cpu_core_seconds)
    row.gpu_seconds, row.cpu_core_seconds, row.as_of = after.gpu_seconds, after.cpu_core_seconds, now
    row.share_key = share_key(after, now, settings)

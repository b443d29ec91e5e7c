"""A GPU's health: ok, degraded or drained, why, and who judged it.

- NVML's faults, read by each worker's heartbeat (worker/gpu_faults.py). A critical fault (an Xid that means
  the hardware failed, uncorrectable ECC errors, memory waiting for a reset to retire pages or remap rows, a
  GPU that fell off the bus) drains the GPU, and it stays drained until an admin undrains it: NVML reports an
  Xid once, and the rest clear only with a reset, after which a person says the GPU is sound. A slowdown the
  hardware imposes (thermal, power brake) degrades it while it lasts.
- An admin drains or undrains it (POST /v1/gpus/{host}/{index}/drain, /undrain).
- A job whose attempts fail twice on it with device errors degrades it, and that job's next attempt is placed
  on other GPUs (note_device_error, avoided).

Drained: placement leaves it (worker/executors/local/host_choice.py's HostView.off), and a job running on it
is asked to stop at its next report step, after a checkpoint, and requeued, as a preempted job is
(stop_jobs_on_drained). Degraded: placed as before, shown in GET /v1/gpus, `trainyard gpus`, the dashboard
and /metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import and_, delete, select
from sqlalchemy.orm import Session

from core.models import GpuHealth, GpuJobFault, GpuLease, Job, utcnow
from core.states import JobStatus
from core.transitions import move
from core.upsert import insert_or_update

# A job's status_reason while it stops because a GPU it runs on was drained, and its requeue's.
GPU_DRAINED = "gpu_drained"
# Device errors of one job on one GPU that degrade the GPU: one may be the job's own bug (an illegal address
# in its kernel), and the same error twice where the job ran elsewhere too is what a failing GPU looks like.
DEVICE_ERRORS_TO_DEGRADE = 2


class GpuState(StrEnum):
    OK = "ok"
    DEGRADED = "degraded"  # placed as before, shown
    DRAINED = "drained"  # nothing new is placed on it; its job is requeued elsewhere


class HealthSource(StrEnum):
    NVML = "nvml"
    ADMIN = "admin"
    JOBS = "jobs"  # a job's device errors


@dataclass(frozen=True)
class Faults:
    """What NVML says is wrong with one GPU now, in words for an admin."""

    critical: tuple[str, ...] = ()  # drains it
    slow: tuple[str, ...] = ()  # degrades it while it lasts


def _put(session: Session, host: str, index: int, state: GpuState, reason: str, source: HealthSource) -> None:
    row = {
        "host": host,
        "gpu_index": index,
        "state": state.value,
        "reason": reason,
        "source": source.value,
        "since": utcnow(),
    }
    # Every worker process of a host judges its GPUs each beat: one row per GPU, whoever writes first.
    insert_or_update(session, GpuHealth, row, ["host", "gpu_index"])


def _rows(session: Session, host: str) -> dict[int, GpuHealth]:
    return {row.gpu_index: row for row in session.scalars(select(GpuHealth).where(GpuHealth.host == host))}


def record_faults(session: Session, host: str, faults: Mapping[int, Faults]) -> None:
    """What one heartbeat read of this host's GPUs (those NVML could not read are not judged): a critical
    fault drains a GPU not drained yet; a slowdown degrades an ok GPU, and its degraded row goes when the
    slowdown ends. A GPU an admin or a job's errors judged keeps that judgement beside a slowdown."""
    if not faults:
        return
    rows = _rows(session, host)
    for index, found in faults.items():
        row = rows.get(index)
        if found.critical:
            if row is None or row.state != GpuState.DRAINED:
                _put(session, host, index, GpuState.DRAINED, "; ".join(found.critical), HealthSource.NVML)
        elif found.slow:
            if row is None or (row.source == HealthSource.NVML and row.state == GpuState.DEGRADED):
                reason = "; ".join(found.slow)
                if row is None or row.reason != reason:
                    _put(session, host, index, GpuState.DEGRADED, reason, HealthSource.NVML)
        elif row is not None and row.source == HealthSource.NVML and row.state == GpuState.DEGRADED:
            session.delete(row)


def drain(session: Session, host: str, index: int, reason: str) -> list[int]:
    """An admin's drain; the jobs asked to stop because of it."""
    _put(session, host, index, GpuState.DRAINED, reason, HealthSource.ADMIN)
    return stop_jobs_on_drained(session, host)


def undrain(session: Session, host: str, index: int) -> bool:
    """Ok again, by an admin's word: its row goes, and with it every job's count of device errors on it, so
    those jobs may be placed there again. False when it was ok already."""
    gone = session.execute(delete(GpuHealth).where(GpuHealth.host == host, GpuHealth.gpu_index == index))
    session.execute(delete(GpuJobFault).where(GpuJobFault.host == host, GpuJobFault.gpu_index == index))
    return bool(gone.rowcount)  # type: ignore[attr-defined]


def stop_jobs_on_drained(session: Session, host: str) -> list[int]:
    """Ask each running job holding a drained GPU of this host to stop at its next report step, after a
    checkpoint, to be requeued elsewhere (running -> preempting, a compare-and-set, so a repeat is a no-op);
    the jobs asked. One still starting is asked once it runs, at the host's next beat."""
    on_drained = session.execute(
        select(GpuLease.job_id, GpuLease.gpu_index, GpuHealth.reason)
        .join(GpuHealth, and_(GpuHealth.host == GpuLease.host, GpuHealth.gpu_index == GpuLease.gpu_index))
        .join(Job, Job.id == GpuLease.job_id)
        .where(GpuLease.host == host, GpuHealth.state == GpuState.DRAINED, Job.status == JobStatus.RUNNING)
    ).all()
    asked = []
    for job_id, index, reason in on_drained:
        if job_id in asked:
            continue
        why = (
            f"GPU {index} of {host} was drained ({reason}); stopping at its next report step, after a "
            "checkpoint, to resume from it on other GPUs"
        )
        if move(session, job_id, JobStatus.RUNNING, JobStatus.PREEMPTING, reason=GPU_DRAINED, message=why):
            asked.append(job_id)
    return asked


def note_device_error(session: Session, job_id: int, host: str, gpus: Iterable[int]) -> list[int]:
    """One more attempt of the job failed with a device error on these GPUs of this host; those it has now
    failed on DEVICE_ERRORS_TO_DEGRADE times (degraded, unless judged worse already), which its next attempt
    avoids."""
    counts = {
        row.gpu_index: row
        for row in session.scalars(
            select(GpuJobFault).where(GpuJobFault.job_id == job_id, GpuJobFault.host == host)
        )
    }
    rows = _rows(session, host)
    again = []
    for gpu in gpus:
        row = counts.get(gpu)
        if row is None:
            row = GpuJobFault(job_id=job_id, host=host, gpu_index=gpu, failures=0)
            session.add(row)
        row.failures += 1
        if row.failures >= DEVICE_ERRORS_TO_DEGRADE:
            again.append(gpu)
            if gpu not in rows:
                why = f"job {job_id} failed on it {row.failures} times with device errors"
                _put(session, host, gpu, GpuState.DEGRADED, why, HealthSource.JOBS)
    return again


def avoided(session: Session, job_id: int) -> dict[str, set[int]]:
    """The GPUs, per host, on which this job failed DEVICE_ERRORS_TO_DEGRADE times with device errors."""
    found: dict[str, set[int]] = {}
    for host, gpu in session.execute(
        select(GpuJobFault.host, GpuJobFault.gpu_index).where(
            GpuJobFault.job_id == job_id, GpuJobFault.failures >= DEVICE_ERRORS_TO_DEGRADE
        )
    ):
        found.setdefault(host, set()).add(gpu)
    return found


def drained(session: Session) -> dict[str, dict[int, str]]:
    """Every drained GPU, per host, with why."""
    found: dict[str, dict[int, str]] = {}
    for row in session.scalars(select(GpuHealth).where(GpuHealth.state == GpuState.DRAINED)):
        found.setdefault(row.host, {})[row.gpu_index] = row.reason
    return found


def judged(session: Session) -> dict[tuple[str, int], GpuHealth]:
    """Every GPU that is not ok, by (host, index)."""
    return {(row.host, row.gpu_index): row for row in session.scalars(select(GpuHealth))}

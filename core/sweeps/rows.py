"""Reads of a sweep's rows: its trials in order, and their reports of the objective summed up by the
database's own aggregates (a trial may report thousands of times, and no GET of the sweep nor any ask reads
them one by one)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from core.models import Metric, SweepTrial


@dataclass(frozen=True)
class Reported:
    last_step: int
    latest: float
    lowest: float
    highest: float


def reported(session: Session, metric: str, job_ids: Sequence[int]) -> dict[int, Reported]:
    """Each job's reports of `metric`, for the jobs that made any: one grouped query on the metrics' key."""
    summed = (
        select(
            Metric.job_id,
            func.max(Metric.step).label("step"),
            func.min(Metric.value).label("lowest"),
            func.max(Metric.value).label("highest"),
        )
        .where(Metric.job_id.in_(job_ids), Metric.name == metric)
        .group_by(Metric.job_id)
        .subquery()
    )
    last = and_(Metric.job_id == summed.c.job_id, Metric.name == metric, Metric.step == summed.c.step)
    query = select(summed.c.job_id, summed.c.step, Metric.value, summed.c.lowest, summed.c.highest).join(
        Metric, last
    )
    return {
        job_id: Reported(step, value, low, high) for job_id, step, value, low, high in session.execute(query)
    }


def trials_of(session: Session, sweep_id: int) -> list[SweepTrial]:
    query = select(SweepTrial).where(SweepTrial.sweep_id == sweep_id).order_by(SweepTrial.number)
    return list(session.scalars(query))

"""Per-job caps on what a job's metrics may store: distinct names (TRAINYARD_JOB_MAX_METRIC_NAMES) and rows
per name (TRAINYARD_JOB_MAX_METRIC_ROWS). A job's events are untrusted input: without caps one job added
60,000 rows and 53 MB to the database in 16 s.

The counts are read once, with one grouped COUNT, when a supervisor first stores a job's metrics, and are
then kept as rows go in, so a cap costs no query per event."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.config import get_settings
from core.models import Job, Metric

LOOKUP_CHUNK = 500  # steps per IN (...), under SQLite's limit on bound parameters


@dataclass
class Admitted:
    """What a batch may store: its rows within the caps, and what the caps held back."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    names_refused: list[str] = field(default_factory=list)
    rows_capped: list[str] = field(default_factory=list)  # names that had rows dropped


class MetricCounts:
    """Rows stored per metric name for one job, as far as this process knows them."""

    def __init__(self, max_names: int, max_rows: int) -> None:
        self.max_names = max_names
        self.max_rows = max_rows
        self._rows: dict[str, int] | None = None  # None until read from the table

    @classmethod
    def from_settings(cls) -> MetricCounts:
        settings = get_settings()
        return cls(settings.job_max_metric_names, settings.job_max_metric_rows)

    def forget(self) -> None:
        """After a rolled-back transaction: the rows it counted did not go in, so count again."""
        self._rows = None

    def admit(
        self, session: Session, job_id: int, names: Iterable[str], rows: Sequence[dict[str, Any]]
    ) -> Admitted:
        """Of the names a batch reports (rows or not: a value that is not finite has none) and its rows, those
        within the caps. Rows read again need no room: they are stored already."""
        counts = self._load(session, job_id)
        admitted = Admitted()
        for name in dict.fromkeys(names):
            if name in counts or len(counts) < self.max_names:
                counts.setdefault(name, 0)
                admitted.names.add(name)
            else:
                admitted.names_refused.append(name)
        for name, offered in _by_name(rows).items():
            if name not in admitted.names:
                continue
            room = self.max_rows - counts[name]
            if len(offered) > room:
                # Near the cap, rows read again must not take the room of new ones.
                stored = _stored_steps(session, job_id, name, list(offered))
                fresh = [row for step, row in offered.items() if step not in stored]
                if len(fresh) > room:
                    admitted.rows_capped.append(name)
                admitted.rows += fresh[: max(room, 0)]
            else:
                admitted.rows += offered.values()
        return admitted

    def stored(self, names: Iterable[str]) -> None:
        """The name of each row that went in (not those found there already)."""
        if self._rows is not None:
            for name, added in Counter(names).items():
                self._rows[name] = self._rows.get(name, 0) + added

    def _load(self, session: Session, job_id: int) -> dict[str, int]:
        if self._rows is None:
            grouped = select(Metric.name, func.count()).where(Metric.job_id == job_id).group_by(Metric.name)
            counted: dict[str, int] = {name: count for name, count in session.execute(grouped)}
            # Names with no row (only non-finite values) are in the latest metrics, and count as names too.
            latest: Mapping[str, Any] = (
                session.scalar(select(Job.latest_metrics).where(Job.id == job_id)) or {}
            )
            self._rows = {**dict.fromkeys(latest, 0), **counted}
        return self._rows


def _by_name(rows: Sequence[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """Rows per name, by step; the first of a step, as the insert keeps it."""
    grouped: dict[str, dict[int, dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row["name"], {}).setdefault(row["step"], row)
    return grouped


def _stored_steps(session: Session, job_id: int, name: str, steps: list[int]) -> set[int]:
    """Which of `steps` the table holds for `name`: a look up by primary key, bounded by the batch."""
    found: set[int] = set()
    for start in range(0, len(steps), LOOKUP_CHUNK):
        chunk = steps[start : start + LOOKUP_CHUNK]
        query = select(Metric.step).where(
            Metric.job_id == job_id, Metric.name == name, Metric.step.in_(chunk)
        )
        found.update(session.scalars(query))
    return found

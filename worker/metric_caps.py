"""Per-job caps on what a job's metrics may store: distinct names (TRAINYARD_JOB_MAX_METRIC_NAMES) and rows
per name (TRAINYARD_JOB_MAX_METRIC_ROWS): one metric at its cap stops only its own rows, never another's. A
job's events are untrusted input: without caps one job added 60,000 rows and 53 MB to the database in 16 s.

A sweep's trial keeps its objective whatever the caps: its name is never refused, and past its rows cap its
newest report is still stored, in place of the one before it (one row past the cap), so that the trial's
value (its last report) and its pruner's latest report stay true.

The counts are read once, with one grouped COUNT, when a supervisor first stores a job's metrics, and are
then kept as rows go in, so a cap costs no query per event."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row, delete, func, select
from sqlalchemy.orm import Session

from core.config import get_settings
from core.models import Job, Metric, Sweep
from core.sweeps.spec import config

LOOKUP_CHUNK = 500  # steps per IN (...), under SQLite's limit on bound parameters


@dataclass
class Admitted:
    """What a batch may store: its rows within the caps, and the names the names cap held back."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    names_refused: list[str] = field(default_factory=list)


class MetricCounts:
    """Rows stored per metric name for one job, as far as this process knows them."""

    def __init__(self, max_names: int, max_rows: int) -> None:
        self.max_names = max_names
        self.max_rows = max_rows
        self._rows: dict[str, int] | None = None  # None until read from the table
        self._objective: str | None = None  # a sweep trial's objective metric
        self._newest = 0  # the objective's largest step stored
        self._capped: set[str] = set()  # names whose cap the job was told of
        self._reached: list[str] = []  # names that reached their cap since `reached` was last asked

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
        within the caps. Rows read again need no room: they are stored already. Past its cap, the objective's
        newest row replaces the one stored past it before (deleted here, in the batch's transaction)."""
        counts = self._load(session, job_id)
        admitted = Admitted()
        for name in dict.fromkeys(names):
            if name in counts or len(counts) < self.max_names or name == self._objective:
                counts.setdefault(name, 0)
                admitted.names.add(name)
            else:
                admitted.names_refused.append(name)
        for name, offered in _by_name(rows).items():
            if name not in admitted.names:
                continue
            room = self.max_rows - counts[name]
            if len(offered) <= room:
                admitted.rows += offered.values()
                continue
            # Near the cap, rows read again must not take the room of new ones.
            stored = _stored_steps(session, job_id, name, list(offered))
            fresh = [row for step, row in offered.items() if step not in stored]
            within = fresh[: max(room, 0)]
            admitted.rows += within
            if name == self._objective and len(fresh) > len(within):
                admitted.rows += self._newest_past_cap(session, job_id, fresh[len(within) :], within)
        return admitted

    def _newest_past_cap(
        self, session: Session, job_id: int, left: list[dict[str, Any]], within: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        newest = max(left, key=lambda row: row["step"])
        if newest["step"] <= max([self._newest, *(row["step"] for row in within)]):
            return []  # an older report, read again after a restart
        counts = self._load(session, job_id)
        if counts[newest["name"]] > self.max_rows:  # the row past the cap is the newest stored
            session.execute(
                delete(Metric).where(
                    Metric.job_id == job_id, Metric.name == newest["name"], Metric.step == self._newest
                )
            )
            counts[newest["name"]] -= 1
        return [newest]

    def stored(self, rows: Iterable[Row[Any]]) -> None:
        """The primary keys (job_id, name, step) of the rows that went in (not those found there already)."""
        if self._rows is None:
            return
        added = Counter[str]()
        for row in rows:
            added[row.name] += 1
            if row.name == self._objective:
                self._newest = max(self._newest, row.step)
        for name, count in added.items():
            self._rows[name] = self._rows.get(name, 0) + count
            if self._rows[name] >= self.max_rows and name not in self._capped:
                self._capped.add(name)
                self._reached.append(name)

    def reached(self) -> list[str]:
        """What to tell the job, once for each metric that reached its cap: the metric, the cap, and what
        happens to its later rows."""
        said = [self._message(name) for name in self._reached]
        self._reached = []
        return said

    def _message(self, name: str) -> str:
        later = (
            "past it, only its newest report is kept, as the sweep trial's value and for its pruner"
            if name == self._objective
            else "its later rows are not stored (its latest value is still shown)"
        )
        return (
            f"metric {name!r} reached {self.max_rows} rows (TRAINYARD_JOB_MAX_METRIC_ROWS, counted per "
            f"metric name): {later}; other metrics are stored as before. Report it less often "
            "(metrics.every_n_steps)"
        )

    def _load(self, session: Session, job_id: int) -> dict[str, int]:
        if self._rows is None:
            grouped = select(Metric.name, func.count()).where(Metric.job_id == job_id).group_by(Metric.name)
            counted: dict[str, int] = {name: count for name, count in session.execute(grouped)}
            job = session.execute(select(Job.latest_metrics, Job.sweep_id).where(Job.id == job_id)).first()
            # Names with no row (only non-finite values) are in the latest metrics, and count as names too.
            latest: Mapping[str, Any] = (job.latest_metrics if job else None) or {}
            self._rows = {**dict.fromkeys(latest, 0), **counted}
            self._objective = _objective(session, job.sweep_id if job else None)
            self._newest = _newest_step(session, job_id, self._objective) if self._objective in counted else 0
            # Told in the transaction that stored the row reaching the cap.
            self._capped = {name for name, count in counted.items() if count >= self.max_rows}
            self._reached = []
        return self._rows


def _objective(session: Session, sweep_id: int | None) -> str | None:
    """The objective metric of the sweep whose trial the job is; None for any other job."""
    sweep = session.get(Sweep, sweep_id) if sweep_id is not None else None
    return config(sweep).objective.metric if sweep is not None else None


def _newest_step(session: Session, job_id: int, name: str | None) -> int:
    query = select(func.max(Metric.step)).where(Metric.job_id == job_id, Metric.name == name)
    return session.scalar(query) or 0


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

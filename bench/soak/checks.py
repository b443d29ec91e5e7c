"""The soak's invariants over what the service holds at the end, read from the database and through the API
as a user reads it: each a row of the table with its figure, the first few offenders named."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx

from bench.soak.client import User
from bench.soak.load import Download
from bench.soak.stack import SoakStack
from jobspec.events import EVENTS_FILE, MetricsEvent, parse_event
from tests.integration.jobs import TERMINAL

SHOWN = 10  # offenders named per check; the figure counts them all
TERMINAL_SQL = ", ".join(f"'{status}'" for status in sorted(TERMINAL))


class Kind(StrEnum):
    INVARIANT = "invariant"  # fails the soak
    TARGET = "target"  # a figure the issue sets a target for; reported, met or not


@dataclass
class Check:
    name: str
    ok: bool
    figure: str
    offenders: list[str] = field(default_factory=list)
    kind: Kind = Kind.INVARIANT
    data: dict[str, Any] = field(default_factory=dict)


def named(offenders: list[str]) -> list[str]:
    return offenders[:SHOWN] + ([f"... and {len(offenders) - SHOWN} more"] if len(offenders) > SHOWN else [])


def quantile(values: Iterable[float], q: float) -> float:
    """The nearest-rank quantile: the value that a fraction `q` of them are at or below; NaN of none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def terminal_once(soak: SoakStack, accepted: set[int]) -> Check:
    """Every job the service accepted (a POST's answer, a sweep's trial) ended, entering an end state once."""
    status = {row.id: row.status for row in soak.rows("SELECT id, status FROM jobs")}
    ended = (
        f"SELECT job_id, count(*) AS n FROM job_events WHERE to_status IN ({TERMINAL_SQL}) GROUP BY job_id"
    )
    ends = Counter({row.job_id: row.n for row in soak.rows(ended)})
    offenders = [f"job {job}: accepted, not in the database" for job in sorted(accepted - status.keys())]
    for job, now in sorted(status.items()):
        if now not in TERMINAL:
            offenders.append(f"job {job}: still {now}")
        elif ends[job] != 1:
            offenders.append(f"job {job}: {now}, after {ends[job]} end states")
    by_status = dict(sorted(Counter(status.values()).items()))
    lost_answers = len(status.keys() - accepted)
    figure = f"{len(status)} jobs {by_status}; {lost_answers} made by a POST whose answer was lost"
    return Check(
        "every accepted job reached one terminal state once", not offenders, figure, named(offenders)
    )


def reported_steps(run_dir: Path) -> set[tuple[str, int]]:
    """(name, step) of every finite metric value the trainer wrote, over all attempts; a line cut short by a
    kill is no report."""
    reported: set[tuple[str, int]] = set()
    path = run_dir / EVENTS_FILE
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    for line in lines:
        try:
            event = parse_event(line)
        except ValueError:
            continue
        if isinstance(event, MetricsEvent):
            reported |= {(name, event.step) for name, value in event.values.items() if math.isfinite(value)}
    return reported


def stored_steps(admin: User, client: httpx.Client, job_id: int) -> list[tuple[str, int]]:
    """Every (name, step) the API lists for the job, page by page, as a user reads them."""
    listed: list[tuple[str, int]] = []
    after: int | None = None
    while True:
        params = {"limit": 10000, **({"after_step": after} if after is not None else {})}
        page = admin.call(client, "GET", f"/v1/jobs/{job_id}/metrics", params=params).json()
        listed += [(row["name"], row["step"]) for row in page["data"]]
        after = page["next_after_step"]
        if after is None:
            return listed


def metric_steps(soak: SoakStack, admin: User, client: httpx.Client) -> Check:
    """No step the trainers reported is missing from what the API lists, none listed twice, none invented."""
    offenders, rows = [], 0
    for row in soak.rows("SELECT id, status FROM jobs ORDER BY id"):
        listed = stored_steps(admin, client, row.id)
        rows += len(listed)
        stored, reported = set(listed), reported_steps(soak.runs_dir / str(row.id))
        doubled = [key for key, n in Counter(listed).items() if n > 1]
        wrong = {
            "reported by the trainer, not stored": reported - stored,
            "listed twice": doubled,
            "stored, never reported": stored - reported,
        }
        offenders += [
            f"job {row.id} ({row.status}): {len(keys)} {what}, e.g. {sorted(keys)[:3]}"
            for what, keys in wrong.items()
            if keys
        ]
    figure = f"{rows} metric rows checked"
    return Check("no metric step lost or doubled", not offenders, figure, named(offenders))


def checkpoints(soak: SoakStack, admin: User, client: httpx.Client, downloads: list[Download]) -> Check:
    """Every stored checkpoint, downloaded now, has the sha256 recorded when it was written; so had every
    download the users made during the soak (those of a checkpoint since removed by keep_last aside)."""
    recorded = {row.id: row.sha256 for row in soak.rows("SELECT id, sha256 FROM checkpoints")}
    offenders = []
    for checkpoint_id, sha in sorted(recorded.items()):
        got = admin.call(client, "GET", f"/v1/checkpoints/{checkpoint_id}/download")
        if got.status_code != 200:
            offenders.append(f"checkpoint {checkpoint_id}: download {got.status_code} {got.text[:100]}")
        elif hashlib.sha256(got.content).hexdigest() != sha:
            offenders.append(f"checkpoint {checkpoint_id}: sha256 differs from the recorded {sha}")
    during = [d for d in downloads if d.checkpoint_id in recorded or d.status == 409]
    offenders += [
        f"checkpoint {d.checkpoint_id}: downloaded during the soak as {d.status}, sha256 {d.sha256 or '-'}"
        for d in during
        if d.status != 200 or d.sha256 != recorded.get(d.checkpoint_id)
    ]
    figure = f"{len(recorded)} at the end; {len(during)} of the {len(downloads)} downloads during the soak"
    return Check("every checkpoint's sha256 matches", not offenders, figure, named(offenders))

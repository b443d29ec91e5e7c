"""The soak (bench/soak, issue 42) for 2 minutes on the embedded default under its light profile, as
`make soak` runs it longer under the full load: under a mixed load from several users (every kind of job, a
sweep, the three receivers, MLflow export, downloads, dashboard pages, the innocent user) and SIGKILLs of the
API, the worker, a rank and a standby, every invariant holds at the end, /healthz never answered 503 among
them. The innocent user's GET p99 is printed with the other figures, not asserted: a timing on a shared box is
a figure, not a test."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.checks import Kind
from bench.soak.profile import LIGHT
from bench.soak.report import markdown, write
from bench.soak.run import soak
from bench.soak.specs import Kind as JobKind
from bench.soak.stack import Db

pytestmark = pytest.mark.soak

MINUTES = 2


# The window, the service's start and its drain (up to 4 minutes on a loaded box), the checks.
@pytest.mark.timeout(MINUTES * 60 + 600)
def test_a_two_minute_soak_keeps_every_invariant(tmp_path: Path) -> None:
    outcome = soak(MINUTES, Db.SQLITE, 0, tmp_path / "service", LIGHT)
    write(outcome, tmp_path)
    print(markdown(outcome))
    missed = {"api", "worker", "rank", "standby"} - {str(k["target"]) for k in outcome.kills if k["pid"]}
    assert not missed, f"the soak killed no {missed}: {outcome.kills}"
    assert {*JobKind, "sweeps"} <= {kind for kind, n in outcome.jobs.items() if n}, outcome.jobs
    failed = [
        f"{check.name}: {check.figure}; {check.offenders}"
        for check in outcome.checks
        if check.kind is Kind.INVARIANT and not check.ok
    ]
    assert not failed, "\n".join(failed)

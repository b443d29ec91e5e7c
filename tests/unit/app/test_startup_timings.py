"""A job's start-up as shown: phases from the stored marks (in order, a missing mark folded into the next
phase), GET /v1/jobs/{id}'s timings, `trainyard status`'s line and the Prometheus histograms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.timings import job_timings, phases
from core.models import Job
from jobspec.startup import Mark
from tests.unit.app.test_prometheus import scrape
from tests.unit.conftest import submit

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]

# A built-in job's marks, in seconds from its submission; stored as JSON gives them back, with string keys.
BUILT_IN = {
    "queued": 0.0,
    "placed": 0.5,
    "launched": 0.75,
    "process_started": 1.0,
    "imports_done": 3.0,
    "data_ready": 3.5,
    "model_built": 4.0,
    "first_step": 5.0,
    "first_step_done": 6.25,
}
EVERY_PHASE = [
    ("queued", 0.5),
    ("launch", 0.25),
    ("process_start", 0.25),
    ("imports", 2.0),
    ("data", 0.5),
    ("model", 0.5),
    ("setup", 1.0),
    ("first_step", 1.25),
]


def test_phases_follow_the_marks_order_whatever_order_they_were_stored_in() -> None:
    assert phases(dict(reversed(BUILT_IN.items()))) == EVERY_PHASE


def test_a_missing_mark_folds_its_phase_into_the_next() -> None:
    # A program job: no data or model marks, so the set-up holds them; no first step of its own.
    program = {name: at for name, at in BUILT_IN.items() if name not in ("data_ready", "model_built")}
    del program["first_step_done"]
    assert phases(program) == [*EVERY_PHASE[:4], ("setup", 2.0)]
    assert phases({"queued": 0.0}) == []
    assert phases({}) == []


def test_to_first_step_and_first_step_need_both_their_ends() -> None:
    shown = job_timings({"attempt": 2, "marks": BUILT_IN})
    assert shown is not None
    assert (shown.attempt, shown.to_first_step_s, shown.first_step_s) == (2, 5.0, 1.25)
    starting = job_timings({"attempt": 1, "marks": {"queued": 0.0, "placed": 0.5}})
    assert starting is not None and (starting.to_first_step_s, starting.first_step_s) == (None, None)
    assert job_timings(None) is None


def stored(job_id: int, session: Session, marks: dict[str, float]) -> None:
    session.execute(update(Job).where(Job.id == job_id).values(timings={"attempt": 1, "marks": marks}))
    session.commit()


def test_the_api_shows_no_timings_before_a_claim_then_the_phases(
    client: TestClient, session: Session
) -> None:
    job_id = submit(client)["id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["timings"] is None
    stored(job_id, session, BUILT_IN)
    timings: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()["timings"]
    assert [(p["phase"], p["seconds"]) for p in timings["phases"]] == EVERY_PHASE
    assert (timings["attempt"], timings["to_first_step_s"], timings["first_step_s"]) == (1, 5.0, 1.25)


def test_status_prints_the_start_up_on_one_line(
    run: CliRunnerCall, client: TestClient, session: Session
) -> None:
    job_id = submit(client)["id"]
    assert "start-up" not in run("status", job_id).output
    stored(job_id, session, BUILT_IN)
    assert (
        "start-up: queued 0.5 s, launch 0.2 s, process start 0.2 s, imports 2.0 s, data 0.5 s, model 0.5 s, "
        "setup 1.0 s -> first step 5.0 s (first step 1.2 s)" in run("status", job_id).output
    )


def test_metrics_has_a_histogram_of_each_phase(client: TestClient, session: Session) -> None:
    first, second = submit(client)["id"], submit(client)["id"]
    stored(first, session, BUILT_IN)
    stored(second, session, {Mark.QUEUED: 0.0, Mark.PLACED: 30.0})  # still starting: one phase so far
    samples = scrape(client)

    def sample(suffix: str, phase: str, le: str | None = None) -> float:
        labels = {("phase", phase), *([("le", le)] if le else [])}
        return samples[(f"trainyard_job_startup_seconds_{suffix}", frozenset(labels))]

    assert sample("count", "queued") == 2
    assert sample("sum", "queued") == 30.5
    assert (sample("bucket", "queued", "0.5"), sample("bucket", "queued", "30.0")) == (1, 2)
    assert sample("count", "first_step") == 1
    assert (sample("count", "to_first_step"), sample("sum", "to_first_step")) == (1, 5.0)

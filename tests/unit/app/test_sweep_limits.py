"""What a sweep may cost (issue 42): its space is counted, never listed; it is planned at a bounded set of
corners, before it takes a write unit; its trials count against its owner's job quota; and its trials cannot
resume from a checkpoint, which is refused rather than silently ignored."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.main import create_app
from app.services import sweeps as sweep_service
from core import db
from core.config import Settings, get_settings
from core.models import Checkpoint, Job, Sweep
from core.quotas import unfinished
from core.sweeps.asks import top_up
from tests.unit.app.test_api_code import GZIP
from tests.unit.app.test_sweeps_api import sweep_body
from tests.unit.code_archives import bundle_archive
from tests.unit.conftest import assert_problem, job_body, submit


def _count_dry_runs(monkeypatch: pytest.MonkeyPatch, also: Callable[[], None] = lambda: None) -> list[int]:
    """Each dry run the sweep's planning makes, counted (and `also` run before it): the real one runs."""
    made: list[int] = []
    real = sweep_service.dry_run

    def counted(*args: Any) -> Any:
        made.append(1)
        also()
        return real(*args)

    monkeypatch.setattr(sweep_service, "dry_run", counted)
    return made


def _program(client: TestClient) -> dict[str, Any]:
    """A program's spec, whose hyperparameters take any value: a space of as many parameters as wanted."""
    bundle = client.post("/v1/code", content=bundle_archive({"train.py": "print(1)\n"}), headers=GZIP)
    return {"code": bundle.json()["id"], "program": {"entrypoint": ["python", "train.py"]}}


def _choices(parameters: int, choices: int) -> dict[str, Any]:
    return {
        f"program.hyperparameters.h{i}": {"type": "categorical", "choices": list(range(choices))}
        for i in range(parameters)
    }


def test_a_float_step_too_fine_to_count_is_a_422_naming_it(client: TestClient) -> None:
    # (high - low) / step overflowed a float when the steps were listed: a plain-text 500.
    step = {"type": "float", "low": -1e308, "high": 1e308, "step": 1e-300}
    response = client.post("/v1/sweeps", json=sweep_body(parameters={"train.lr": step}))
    assert_problem(response, "parameters.train.lr.float.step", "more than 2**53 steps")


def test_a_grid_past_its_cap_is_refused_naming_the_parameter(client: TestClient, settings: Settings) -> None:
    # 200 x 200 points: the product passes TRAINYARD_SWEEP_MAX_GRID_POINTS at the second parameter.
    space = {
        "train.max_steps": {"type": "int", "low": 1, "high": 200},
        "train.batch_size": {"type": "int", "low": 1, "high": 200},
    }
    response = client.post("/v1/sweeps", json=sweep_body(parameters=space, sampler="grid"))
    assert_problem(response, "parameters.train.batch_size", "TRAINYARD_SWEEP_MAX_GRID_POINTS=10000")
    assert "sampler tpe or random" in response.text


def test_a_huge_int_range_is_sampled_without_being_listed(client: TestClient) -> None:
    # An int range's top was the last item of its listed values: 6e7 took 2.3 GB and 10 s in the API.
    space = {"program.hyperparameters.seed": {"type": "int", "low": 0, "high": 2**53, "step": 7}}
    response = client.post("/v1/sweeps", json=sweep_body(spec=_program(client), parameters=space, parallel=4))
    assert response.status_code == 201, response.text
    trials = client.get(f"/v1/sweeps/{response.json()['id']}/trials").json()["data"]
    assert len(trials) == 4
    for trial in trials:
        assert 0 <= trial["params"]["program.hyperparameters.seed"] <= 2**53 - 2**53 % 7
        assert trial["params"]["program.hyperparameters.seed"] % 7 == 0


def test_choices_past_their_cap_are_refused_naming_the_parameter(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 64 x 1,000 choices (300 KB) held the API for 7.5 minutes, a dry run per choice; and every ask of its
    # trials would compare and copy each trial's 64,000 choices.
    made = _count_dry_runs(monkeypatch)
    body = sweep_body(spec=_program(client), parameters=_choices(64, 1000))
    fragment = f"TRAINYARD_SWEEP_MAX_CHOICES={settings.sweep_max_choices}"
    assert_problem(
        client.post("/v1/sweeps", json=body), "parameters.program.hyperparameters.h0.choices", fragment
    )
    assert made == []
    # The sum is capped: 3 parameters of 100 pass 256 at the third.
    body = sweep_body(spec=_program(client), parameters=_choices(3, 100))
    assert_problem(
        client.post("/v1/sweeps", json=body), "parameters.program.hyperparameters.h2.choices", fragment
    )


def test_a_space_is_planned_at_a_bounded_set_of_corners(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every categorical choice was planned, a dry run of ~7 ms each: 64 x 4 choices made 130.
    made = _count_dry_runs(monkeypatch)
    response = client.post("/v1/sweeps", json=sweep_body(spec=_program(client), parameters=_choices(64, 4)))
    assert response.status_code == 201, response.text
    assert len(made) == settings.sweep_max_dry_runs == 8


def test_planning_a_sweep_holds_no_write_unit(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sweeps planning at once held both of SQLite's write units (core/db.py): another user's dry run
    waited for them (17.8 s behind four large sweeps). Here both sweeps' planning waits, and a dry run must
    still be answered."""
    planning = threading.Semaphore(0)
    release = threading.Event()

    def held() -> None:
        planning.release()
        release.wait(10)

    made = _count_dry_runs(monkeypatch, held)
    sweeps = db.SQLITE_UNITS_AT_ONCE
    with TestClient(create_app()) as client, ThreadPoolExecutor(sweeps) as pool:
        created = [pool.submit(client.post, "/v1/sweeps", json=sweep_body()) for _ in range(sweeps)]
        for _ in range(sweeps):
            assert planning.acquire(timeout=10), "each sweep is planning"
        timer = threading.Timer(5, release.set)  # on the old code, the dry run waits for this
        timer.start()
        response = client.post("/v1/jobs", params={"dry_run": "true"}, json=job_body())
        answered_while_planning = not release.is_set()
        timer.cancel()
        release.set()
        assert response.status_code == 200, response.text
        assert answered_while_planning
        assert [future.result().status_code for future in created] == [201] * sweeps
    assert len(made) == 2 * sweeps


def test_a_sweep_s_trials_count_against_the_job_quota(
    client: TestClient, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # parallel 64 made 64 unfinished jobs against a 32-job quota.
    monkeypatch.setenv("TRAINYARD_QUOTA_MAX_JOBS", "3")
    get_settings.cache_clear()
    submit(client)
    response = client.post("/v1/sweeps", json=sweep_body(parallel=8, max_trials=6))
    assert response.status_code == 201, response.text
    sweep = response.json()
    assert sweep["trials"]["running"] == 2, "as many as the quota leaves room for"
    user = sweep["owner"]
    assert unfinished(session, user)[0] == 3
    # A trial that ends frees room: the next is made, and the owner stays within the quota.
    first = client.get(f"/v1/sweeps/{sweep['id']}/trials").json()["data"][0]
    assert client.post(f"/v1/jobs/{first['job_id']}/cancel").status_code == 200
    top_up(sweep["id"])  # the worker's reconciler, after the trial's end
    trials = client.get(f"/v1/sweeps/{sweep['id']}/trials").json()["data"]
    assert len(trials) == 3
    assert unfinished(session, user)[0] == 3
    # With no room at all, a new sweep could make no trial: a 429 naming the quota.
    response = client.post("/v1/sweeps", json=sweep_body())
    assert response.status_code == 429, response.text
    assert "TRAINYARD_QUOTA_MAX_JOBS=3" in response.json()["detail"]
    assert session.scalar(select(func.count()).select_from(Sweep)) == 1


def _own_checkpoint(client: TestClient, session: Session, settings: Settings) -> int:
    source = submit(client)
    path = str(settings.runs_dir / str(source["id"]) / "checkpoints" / "step4.pt")
    session.add(Checkpoint(job_id=source["id"], step=4, epoch=0, path=path, size_bytes=10))
    session.commit()
    checkpoint_id = session.scalar(select(Checkpoint.id).where(Checkpoint.path == path))
    assert checkpoint_id is not None
    return checkpoint_id


def test_resume_from_as_a_parameter_is_refused(
    client: TestClient, session: Session, settings: Settings
) -> None:
    # Only the ends of a parameter were owner-checked, and no trial resumed: its plan had no resume path.
    checkpoint = _own_checkpoint(client, session, settings)
    space = {"checkpoint.resume_from": {"type": "categorical", "choices": [checkpoint, checkpoint]}}
    response = client.post("/v1/sweeps", json=sweep_body(parameters=space))
    assert_problem(response, "parameters.checkpoint.resume_from", "cannot resume from a checkpoint")
    assert session.scalar(select(func.count()).select_from(Job).where(Job.sweep_id.is_not(None))) == 0


def test_resume_from_in_the_sweep_s_spec_is_refused(
    client: TestClient, session: Session, settings: Settings
) -> None:
    checkpoint = _own_checkpoint(client, session, settings)
    body = sweep_body(spec=job_body(checkpoint={"resume_from": checkpoint}))
    assert_problem(client.post("/v1/sweeps", json=body), "spec.checkpoint.resume_from", "starts from scratch")

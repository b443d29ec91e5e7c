"""`trainyard sweep` against the real app in-process: submit (with --code), ls, status and cancel; tables that
keep trial, job and state whole in 80 columns, `--output json`, and --follow's exit status."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient

from app.cli.render import console
from core.db import session_scope
from core.models import Job, Metric
from core.states import JobStatus
from core.sweeps.asks import reconcile_sweeps
from core.transitions import move
from tests.unit.app.table_rows import table_rows
from tests.unit.app.test_sweeps_api import sweep_body
from tests.unit.conftest import job_body

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]

NAME = "digits-mlp-lr-and-width-search-with-asha"
PARAMETERS = {
    "train.lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
    "model.kwargs.hidden": {"type": "int", "low": 16, "high": 4096, "log": True},
    "train.weight_decay": {"type": "float", "low": 1e-6, "high": 0.1, "log": True},
}


def sweep_file(tmp_path: Path, **changes: Any) -> Path:
    spec = job_body(model={"arch": "mlp", "kwargs": {"hidden": 32}})
    body = sweep_body(name=NAME, spec=spec, parameters=PARAMETERS, **changes)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(body))
    return path


def fits(output: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in output.splitlines())


def test_submit_ls_status_and_cancel_at_80_columns(
    run: CliRunnerCall, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console, "width", 80)
    submitted = run("sweep", "submit", sweep_file(tmp_path))
    assert submitted.exit_code == 0, submitted.output
    # Rich wraps the line at 80 columns.
    assert " ".join(submitted.output.split()).startswith(
        f"sweep 1 ({NAME}) running: 4 trials, 2 at a time, sampler tpe, pruner asha, minimize eval_loss"
    )

    listed = run("sweep", "ls").output
    assert fits(listed), listed
    assert [row[:4] for row in table_rows(listed)] == [["1", NAME, "running", "0/4"]]
    assert "created" not in listed and "created" in run("sweep", "ls", "--wide").output

    shown = run("sweep", "status", 1).output
    assert fits(shown), shown
    assert f"sweep 1 ({NAME}): running, 0/4 trials ended" in shown
    assert "best:      - (no trial has completed yet)" in shown
    assert "trials:    2 running, 0 completed, 0 pruned, 0 failed" in shown
    rows = table_rows(shown)
    # Queued trials list with their jobs; a running trial shows its job's state.
    assert [row[:3] for row in rows] == [["0", "1", "queued"], ["1", "2", "queued"]]
    assert all(row[6].startswith("lr=") and row[6].endswith("…") for row in rows), rows
    wide = run("sweep", "status", 1, "--wide").output
    assert "note" in wide and "weight_decay=" in wide and "hidden=" in wide

    answer = json.loads(run("sweep", "status", 1, "--output", "json").stdout)
    assert answer["sweep"]["id"] == 1 and [t["job_id"] for t in answer["trials"]] == [1, 2]
    assert json.loads(run("sweep", "ls", "--output", "json").stdout)["data"][0]["name"] == NAME

    cancelled = run("sweep", "cancel", 1)
    assert cancelled.output.startswith(f"sweep 1 ({NAME}) cancelled; best so far: -")
    assert [row[:3] for row in table_rows(run("sweep", "status", 1).output)] == [
        ["0", "1", "failed"],
        ["1", "2", "failed"],
    ]
    again = run("sweep", "cancel", 1)
    assert again.exit_code == 1 and "(HTTP 409)" in again.output


def test_submit_code_pushes_the_folder_as_every_trial_s_code(
    run: CliRunnerCall, client: TestClient, tmp_path: Path
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text("")
    submitted = run("sweep", "submit", sweep_file(tmp_path), "--code", folder)
    assert submitted.exit_code == 0, submitted.output
    bundle_id = client.get("/v1/code").json()["data"][0]["id"]
    trials = client.get("/v1/sweeps/1/trials").json()["data"]
    assert [client.get(f"/v1/jobs/{t['job_id']}").json()["spec"]["code"] for t in trials] == [bundle_id] * 2


def test_a_file_without_a_spec_is_refused_naming_the_field(run: CliRunnerCall, tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"name": "x"}))
    refused = run("sweep", "submit", path, "--code", tmp_path)
    assert refused.exit_code == 1 and 'has no "spec" object' in refused.output


def _complete_trials() -> None:
    """Both trials of a two-trial sweep run, report the objective, and succeed; after each end, the worker's
    reconciler takes its pass, which settles the sweep."""
    for job_id, loss in ((1, 0.5), (2, 0.25)):
        while not _exists(job_id):
            time.sleep(0.05)
        with session_scope() as session:
            move(session, job_id, JobStatus.QUEUED, JobStatus.STARTING)
            move(session, job_id, JobStatus.STARTING, JobStatus.RUNNING, progress_step=10, progress_total=10)
            session.add(Metric(job_id=job_id, name="eval_loss", step=10, value=loss))
        time.sleep(0.1)
        with session_scope() as session:
            move(session, job_id, JobStatus.RUNNING, JobStatus.SUCCEEDED)
        reconcile_sweeps()


def _exists(job_id: int) -> bool:
    with session_scope() as session:
        return session.get(Job, job_id) is not None


@pytest.fixture
def terminal(run: CliRunnerCall, monkeypatch: pytest.MonkeyPatch) -> CliRunnerCall:
    """Live draws on a console of its own, as wide as this non-terminal's default (80): the shared console
    lays its frames out as wide, as it would in a terminal, where both measure the same one."""
    monkeypatch.setattr(console, "width", 80)
    return run


def test_follow_redraws_the_trials_until_the_sweep_completes(terminal: CliRunnerCall, tmp_path: Path) -> None:
    trainer = threading.Thread(target=_complete_trials)
    trainer.start()
    result = terminal("sweep", "submit", sweep_file(tmp_path, max_trials=2), "--follow")
    assert fits(result.output), result.output
    trainer.join()
    assert result.exit_code == 0, result.output
    # Live prints its last frame where the terminal is no terminal: every trial as it ended.
    assert [row[:3] for row in table_rows(result.output)] == [
        ["0", "1", "completed"],
        ["1", "2", "completed"],
    ]
    assert "best:      trial 1 (job 2): 0.25 with lr=" in result.output


def test_follow_of_a_sweep_cancelled_meanwhile_exits_non_zero(
    terminal: CliRunnerCall, client: TestClient, tmp_path: Path
) -> None:
    assert terminal("sweep", "submit", sweep_file(tmp_path)).exit_code == 0
    canceller = threading.Timer(0.3, lambda: client.post("/v1/sweeps/1/cancel"))
    canceller.start()
    result = terminal("sweep", "status", 1, "--follow")
    canceller.join()
    assert result.exit_code == 1, result.output
    assert "sweep 1 (" in result.output and "cancelled" in result.output.splitlines()[0]

"""`trainyard sweep` against the real app in-process: submit (with --code), ls, status and cancel; tables that
keep trial, job and state whole in 80 columns, `--output json`, and --follow's exit status."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient

from app.cli.render import NBSP
from app.cli.sweep_view import steps_saved_text
from app.schemas import SweepPublic, TrialPublic
from app.services.sweeps import steps_spared
from core.db import session_scope
from core.models import Job, Metric
from core.states import JobStatus, TrialState
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


def test_submit_ls_status_and_cancel_at_80_columns(run: CliRunnerCall, tmp_path: Path) -> None:
    run.columns(80)
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
    with session_scope() as session:
        move(session, 1, JobStatus.QUEUED, JobStatus.STARTING)
        move(session, 1, JobStatus.STARTING, JobStatus.RUNNING, progress_step=40, progress_total=100)
    # The 160 steps the running trials have still to run are not saved: nothing was pruned.
    assert "steps:     40 used, none saved by pruning" in run("sweep", "status", 1).output
    wide = run("sweep", "status", 1, "--wide").output
    assert "note" in wide and "weight_decay=" in wide and "hidden=" in wide

    answer = json.loads(run("sweep", "status", 1, "--output", "json").stdout)
    assert answer["sweep"]["id"] == 1 and [t["job_id"] for t in answer["trials"]] == [1, 2]
    assert json.loads(run("sweep", "ls", "--output", "json").stdout)["data"][0]["name"] == NAME

    cancelled = run("sweep", "cancel", 1)
    assert cancelled.output.startswith(f"sweep 1 ({NAME}) cancelled; best so far: -")
    # The running trial's job stops as a cancel stops a job; the queued one's ends at once.
    assert [row[:3] for row in table_rows(run("sweep", "status", 1).output)] == [
        ["0", "1", "cancelling"],
        ["1", "2", "failed"],
    ]
    again = run("sweep", "cancel", 1)
    assert again.exit_code == 1 and "(HTTP 409 at http://testserver, from TRAINYARD_URL)" in again.output


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
def terminal(run: CliRunnerCall) -> CliRunnerCall:
    """An 80-column terminal, as rich takes TTY_COMPATIBLE=1 to be: --follow redraws the sweep live."""
    run.columns(80)
    run.env["TTY_COMPATIBLE"] = "1"
    return run


def visible(output: str) -> str:
    """A terminal's output without its control sequences (Live's cursor moves)."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)


def test_follow_redraws_the_trials_until_the_sweep_completes(terminal: CliRunnerCall, tmp_path: Path) -> None:
    trainer = threading.Thread(target=_complete_trials)
    trainer.start()
    result = terminal("sweep", "submit", sweep_file(tmp_path, max_trials=2), "--follow")
    trainer.join()
    assert result.exit_code == 0, result.output
    shown = visible(result.output)
    assert fits(shown), shown
    # The last frame: every trial as it ended.
    assert [row[:3] for row in table_rows(shown)[-2:]] == [["0", "1", "completed"], ["1", "2", "completed"]]
    assert "best:      trial 1 (job 2): 0.25 with lr=" in shown


def test_follow_prints_a_line_per_change_where_stdout_is_no_terminal(
    run: CliRunnerCall, tmp_path: Path
) -> None:
    run.columns(80)
    trainer = threading.Thread(target=_complete_trials)
    trainer.start()
    result = run("sweep", "submit", sweep_file(tmp_path, max_trials=2), "--follow")
    trainer.join()
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    changes = [line for line in result.output.splitlines() if line.startswith("sweep 1 trial")]
    assert len(changes) == len(set(changes)), "a line per change, never the same twice"
    assert changes[0].startswith("sweep 1 trial 0 (job 1) ")
    assert "sweep 1 trial 0 (job 1) completed at step 10/10: eval_loss=0.5 at its last report" in changes
    assert "sweep 1 trial 1 (job 2) completed at step 10/10: eval_loss=0.25 at its last report" in changes
    assert "best:      trial 1 (job 2): 0.25 with lr=" in result.output


def test_follow_of_a_sweep_cancelled_meanwhile_exits_non_zero(
    run: CliRunnerCall, client: TestClient, tmp_path: Path
) -> None:
    assert run("sweep", "submit", sweep_file(tmp_path)).exit_code == 0
    # Late enough that the follow has shown the queued trial first, on a loaded box too (0.3 s was not).
    canceller = threading.Timer(1.0, lambda: client.post("/v1/sweeps/1/cancel"))
    canceller.start()
    result = run("sweep", "status", 1, "--follow")
    canceller.join()
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == "sweep 1 trial 0 (job 1) queued"
    assert any(line.startswith(f"sweep 1 ({NAME}): cancelled, ") for line in lines), lines


def trial(state: TrialState, steps: int | None, total: int | None) -> TrialPublic:
    return TrialPublic(
        number=0,
        job_id=1,
        job_status=None,
        state=state,
        params={},
        latest=None,
        best=None,
        value=None,
        message=None,
        steps=steps,
        total_steps=total,
    )


def test_steps_saved_count_only_what_pruned_trials_did_not_run() -> None:
    """The API's steps_if_unpruned (app/services/sweeps.py::steps_spared) and the line `sweep status` prints
    from it: a running trial's steps still to come were counted as saved before any prune."""
    running = [trial(TrialState.RUNNING, 40, 100), trial(TrialState.RUNNING, 0, 100)]
    assert steps_spared(running) == 0
    assert steps_saved_text(summary(40, running)).replace(NBSP, " ") == "40 used, none saved by pruning"
    ended = [
        trial(TrialState.PRUNED, 30, 100),
        trial(TrialState.COMPLETED, 100, 100),
        trial(TrialState.FAILED, 10, 100),
        trial(TrialState.PRUNED, 5, None),  # pruned before its job said how far it would go: none known
    ]
    assert steps_spared([*ended, *running]) == 70
    used = 30 + 100 + 10 + 5 + 40
    assert steps_saved_text(summary(used, [*ended, *running])).replace(NBSP, " ") == (
        "185 used, 70 saved by pruning (27%)"
    )


def summary(used: int, trials: list[TrialPublic]) -> SweepPublic:
    """The steps figures of a sweep as the API answers them for these trials."""
    return SweepPublic.model_construct(steps_used=used, steps_if_unpruned=used + steps_spared(trials))


def test_json_of_every_sweep_command_is_the_api_answer_alone(run: CliRunnerCall, tmp_path: Path) -> None:
    made = json.loads(run("sweep", "submit", sweep_file(tmp_path), "--output", "json").stdout)
    assert made["id"] == 1 and made["name"] == NAME and made["status"] == "running"
    cancelled = json.loads(run("sweep", "cancel", 1, "--output", "json").stdout)
    assert cancelled["id"] == 1 and cancelled["status"] == "cancelled"
    refused = run("sweep", "status", 1, "--follow", "--output", "json")
    assert refused.exit_code == 2 and "leave out one of them" in refused.output

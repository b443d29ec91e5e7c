"""`--output json` on every command that shows one of the API's objects: the object as the API returns it,
alone on stdout (json.loads fails on anything beside it); and `status` laid out for 80 columns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from click.testing import Result
from fastapi.testclient import TestClient

from app.services.runs import log_path
from core.config import Settings
from core.states import JobStatus
from tests.unit.app.test_cli_commands import set_job, spec_file
from tests.unit.conftest import submit

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]


def answer(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_job_commands_print_the_api_object_alone(
    run: CliRunnerCall, client: TestClient, tmp_path: Path
) -> None:
    spec = spec_file(tmp_path, name="as-json")
    dry = answer(run("submit", spec, "--dry-run", "--output", "json"))
    assert dry["job"] is None and dry["plan"]["world_size"] == 1
    made = answer(run("submit", spec, "--output", "json"))
    job_id = made["job"]["id"]
    assert made["job"]["name"] == "as-json" and made["plan"]["strategy"] == "single"
    assert answer(run("status", job_id, "--output", "json")) == client.get(f"/v1/jobs/{job_id}").json()
    assert answer(run("priority", job_id, 5, "--output", "json"))["priority"] == 5
    assert answer(run("cancel", job_id, "--output", "json"))["status"] == "cancelled"
    retried = answer(run("retry", job_id, "--output", "json"))
    assert retried["job"]["parent_id"] == job_id and retried["job"]["status"] == "queued"


def test_logs_print_the_whole_log_as_one_chunk(
    run: CliRunnerCall, client: TestClient, settings: Settings
) -> None:
    job_id = submit(client)["id"]
    path = log_path(settings, job_id, 0)
    path.parent.mkdir(parents=True)
    text = "step 1 loss 0.5\n" * 8000  # 128,000 bytes: two of the API's pages
    path.write_text(text)
    set_job(job_id, status=JobStatus.SUCCEEDED)
    chunk = answer(run("logs", job_id, "--output", "json"))
    assert chunk == {"rank": 0, "offset": 0, "next_offset": len(text), "text": text, "eof": True}


def test_follow_and_json_are_refused_together(run: CliRunnerCall, client: TestClient, tmp_path: Path) -> None:
    job_id = submit(client)["id"]
    for args in (("status", job_id), ("logs", job_id), ("submit", spec_file(tmp_path)), ("metrics", job_id)):
        refused = run(*args, "--follow", "--output", "json")
        assert refused.exit_code == 2 and "leave out one of them" in refused.output, args


def test_keys_and_code_print_the_api_object_alone(run: CliRunnerCall, tmp_path: Path) -> None:
    made = answer(run("keys", "create", "--user", "ada", "--output", "json"))
    assert made["user"] == "ada" and made["token"]
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "model.py").write_text("WIDTH = 8\n")
    pushed = answer(run("code", "push", folder, "--output", "json"))
    assert pushed["id"].startswith("sha256:") and pushed["file_count"] == 1
    shown = answer(run("code", "show", pushed["id"][:11], "--output", "json"))
    assert shown["id"] == pushed["id"] and [f["path"] for f in shown["files"]] == ["model.py"]


def test_status_at_80_columns_wraps_between_phrases_and_names_each_field(
    run: CliRunnerCall, client: TestClient
) -> None:
    run.columns(80)
    job_id = submit(client, name="x" * 48)["id"]
    placed = "placed by worker box-a:1 on GPUs [0, 1]; waiting for the launch of torchrun with 2 ranks"
    metrics = {"loss": 0.25, "samples_per_s": 12345.6, "eval_accuracy": 0.9, "lr": 0.0003, "grad_norm": 1.5}
    set_job(job_id, message=placed, progress_total=20000, progress_step=1234, latest_metrics=metrics)
    shown = run("status", job_id).output
    lines = shown.splitlines()
    assert all(len(line) <= 80 for line in lines), shown
    assert "reason" not in shown, "no reason was given: none is shown, nor a '-' in its place"
    assert lines[2] == "  message:  #1 in queue: placed by worker box-a:1 on GPUs [0, 1]; waiting for"
    assert lines[3] == "            the launch of torchrun with 2 ranks"
    phrases = ["ETA -", "1234/20000", "loss 0.25", "samples_per_s 12,346", "eval_accuracy 0.9", "lr 0.0003"]
    assert all(any(phrase in line for line in lines) for phrase in phrases), shown
    set_job(job_id, status=JobStatus.FAILED, status_reason="exception", message="ValueError: no data")
    failed = run("status", job_id).output
    assert "  reason:   exception\n  message:  ValueError: no data\n" in failed

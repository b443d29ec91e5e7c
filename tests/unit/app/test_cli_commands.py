"""The `trainyard` commands against the real app in-process (only the HTTP connection is swapped)."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.cli import cli
from app.client import DEFAULT_URL
from app.services.keys import Caller, caller_for_token
from app.services.runs import log_path
from core.config import Settings
from core.db import session_scope
from core.keys import create_key, list_keys
from core.models import Job, Metric, Worker, utcnow
from core.states import JobStatus
from tests.unit.app.table_rows import table_rows
from tests.unit.conftest import job_body, submit

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]


def spec_file(tmp_path: Path, **sections: object) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(job_body(**sections)))
    return path


def set_job(job_id: int, **values: object) -> None:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(**values))


def test_submit_ls_status_priority_queue_cancel_retry(run: CliRunnerCall, tmp_path: Path) -> None:
    dry = run("submit", spec_file(tmp_path), "--dry-run")
    assert dry.exit_code == 0 and json.loads(dry.stdout)["world_size"] == 1
    bf16 = run("submit", spec_file(tmp_path, precision="bf16"), "--dry-run")
    assert json.loads(bf16.stdout)["precision"] == "bf16"
    assert "warning: precision 'bf16' on the CPU" in bf16.stderr
    submitted = run("submit", spec_file(tmp_path, name="mnist-mlp"))
    assert submitted.exit_code == 0, submitted.output
    assert submitted.output.startswith("job 1 (mnist-mlp) queued: single x1 on cpu, fp32")
    assert "mnist-mlp" in run("ls").output
    assert "mnist-mlp" in run("ls", "--status", "queued").output
    assert "mnist-mlp" not in run("ls", "--status", "running").output
    status = run("status", 1).output
    assert "job 1 (mnist-mlp): queued, attempt 0, priority 0" in status and "progress: -, ETA -" in status
    assert "plan:     single on cpu x1, fp32, per-rank batch 8" in status
    assert run("priority", 1, 9).output.startswith("job 1 priority 9: #1 in queue")
    queue = run("queue").output
    assert "mnist-mlp" in queue and "waiting for a worker to take it" in queue
    assert run("cancel", 1).output.startswith("job 1 cancelled (cancelled_by_user)")
    assert run("queue").output.strip() == "the queue is empty"
    assert run("retry", 1).output.startswith("job 2 (mnist-mlp) queued: a retry of job 1")
    assert run("retry", 1).output.startswith("job 2 (mnist-mlp) queued: job 1's retry, made before")
    assert run("retry", 1, "--again", "--from", "scratch").output.startswith(
        "job 3 (mnist-mlp) queued: a retry"
    )
    assert "parent:   job 1" in run("status", 3).output
    assert "parent" in run("ls").output.splitlines()[1]


def test_api_refusals_print_the_detail_without_a_traceback(run: CliRunnerCall, tmp_path: Path) -> None:
    missing = run("status", 77)
    assert missing.exit_code == 1
    assert missing.output.startswith("Error: job 77 does not exist") and "Traceback" not in missing.output
    bad = run("submit", spec_file(tmp_path, train={"lr": -1, "max_steps": 5}))
    assert (
        bad.exit_code == 1
        and "train.lr" in bad.output
        and "(HTTP 422 at http://testserver, from TRAINYARD_URL)" in bad.output
    )
    (tmp_path / "broken.json").write_text("{nope")
    broken = run("submit", tmp_path / "broken.json")
    assert broken.exit_code == 1 and "is not valid JSON" in broken.output


def test_unreachable_api_names_the_url() -> None:
    result = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:9", "ls"])
    assert result.exit_code == 1
    assert "nothing listening at http://127.0.0.1:9 (from --url)" in result.output


def test_a_refusal_at_the_default_url_names_it_as_the_default(
    run: CliRunnerCall, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a checkout another service may answer on the default port: its 404 says where it came from."""
    monkeypatch.chdir(tmp_path)
    del run.env["TRAINYARD_URL"]
    monkeypatch.delenv("TRAINYARD_URL", raising=False)
    missing = run("status", 2)
    assert missing.exit_code == 1 and missing.stdout == ""
    assert missing.stderr == (
        f"no TRAINYARD_URL set; using {DEFAULT_URL}\n"
        "Error: job 2 does not exist; list jobs with GET /v1/jobs "
        f"(HTTP 404 at {DEFAULT_URL}, the default; set TRAINYARD_URL)\n"
    )


def _train(job_id: int, final: JobStatus, message: str = "the end") -> None:
    """A trainer's progress on the job once the CLI has submitted it (which a loaded box may take seconds
    to do: an update before it would change no row)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with session_scope() as session:
            if session.get(Job, job_id) is not None:
                break
        time.sleep(0.05)
    time.sleep(0.2)
    set_job(job_id, status=JobStatus.RUNNING, running_at=utcnow(), progress_total=100)
    for step in (20, 60, 100):
        time.sleep(0.1)
        set_job(job_id, progress_step=step, latest_metrics={"loss": 1 / step, "samples_per_s": 1234.5})
    set_job(job_id, status=final, finished_at=utcnow(), message=message)


@pytest.mark.parametrize(("final", "exit_code"), [(JobStatus.SUCCEEDED, 0), (JobStatus.FAILED, 1)])
def test_submit_follow_ends_with_the_status_and_its_exit_code(
    run: CliRunnerCall, tmp_path: Path, final: JobStatus, exit_code: int
) -> None:
    trainer = threading.Thread(target=_train, args=(1, final))
    trainer.start()
    result = run("submit", spec_file(tmp_path), "--follow")
    trainer.join()
    assert result.exit_code == exit_code
    assert "100/100" in result.output
    assert result.output.rstrip().endswith(f"job 1 {final}: the end")


def test_submit_follow_at_80_columns_never_cuts_the_job_nor_its_count(
    run: CliRunnerCall, tmp_path: Path
) -> None:
    run.columns(80)
    for job_id in range(1, 12):  # job 12: an id of two digits, as "job 2…" was job 28's
        set_job(job_id, status=JobStatus.CANCELLED)
        assert run("submit", spec_file(tmp_path)).exit_code == 0
    why = "exception: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total)"
    trainer = threading.Thread(target=_train, args=(12, JobStatus.FAILED, why))
    trainer.start()
    result = run("submit", spec_file(tmp_path), "--follow")
    trainer.join()
    assert result.exit_code == 1
    bar = next(line for line in result.output.splitlines() if "100/100" in line)
    assert len(bar) <= 80 and bar.startswith("job 12 failed ") and bar.endswith("…"), bar
    assert why in " ".join(result.output.split()), "the outcome line says it all"


def test_metrics_table_stream_and_compare(run: CliRunnerCall, client: TestClient) -> None:
    fast, slow = submit(client, name="ddp-bf16")["id"], submit(client, name="single-fp32")["id"]
    start = utcnow()
    with session_scope() as session:
        for job_id, speed, seconds in ((fast, 4000.0, 30), (slow, 1000.0, 95)):
            for step, loss in ((10, 0.9), (20, 0.5), (30, 0.25)):
                session.add(Metric(job_id=job_id, name="loss", step=step, value=loss))
                session.add(Metric(job_id=job_id, name="samples_per_s", step=step, value=speed + step))
            session.add(Metric(job_id=job_id, name="eval_accuracy", step=30, value=0.93))
            finished_at = start + timedelta(seconds=seconds)
            session.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(status=JobStatus.SUCCEEDED, running_at=start, finished_at=finished_at)
            )
        # The worker's GPU telemetry (worker/executors/local/telemetry.py): the column is the mean over GPUs
        # and samples.
        for name, step, percent in (
            ("gpu_util/0", 10, 80.0),
            ("gpu_util/0", 20, 40.0),
            ("gpu_util/1", 10, 90.0),
        ):
            session.add(Metric(job_id=fast, name=name, step=step, value=percent))
        session.add(Metric(job_id=fast, name="gpu_power_w/0", step=10, value=300.0))
    table = run("metrics", fast, "--name", "loss").output
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in table.splitlines() if "loss" in line]
    assert rows == [["10", "0", "loss", "0.9"], ["20", "0", "loss", "0.5"], ["30", "0", "loss", "0.25"]]
    live = run("metrics", fast, "-f", "--name", "loss").output.splitlines()
    assert [line.split()[1] for line in live[:-1]] == ["10", "20", "30"]
    assert live[-1] == f"job {fast} succeeded"
    compared = {row[0]: row[1:] for row in table_rows(run("compare", fast, slow).output)}
    assert compared == {
        "name": ["ddp-bf16", "single-fp32"],
        "status": ["succeeded", "succeeded"],
        "strategy": ["single", "single"],
        "precision": ["fp32", "fp32"],
        "devices": ["cpu x1", "cpu x1"],
        "wall": ["0:30", "1:35"],
        "samples/s": ["4,020", "1,020"],
        "final loss": ["0.25", "0.25"],
        "eval acc": ["0.93", "0.93"],
        "peak MB": ["-", "-"],
        "GPU util %": ["70", "-"],
    }


def test_logs_print_a_rank_log(run: CliRunnerCall, client: TestClient, settings: Settings) -> None:
    job_id = submit(client)["id"]
    path = log_path(settings, job_id, 1)
    path.parent.mkdir(parents=True)
    path.write_text("rank 1 says hello\n" * 3)
    set_job(job_id, status=JobStatus.SUCCEEDED)
    assert run("logs", job_id, "--rank", 1).output == "rank 1 says hello\n" * 3
    assert run("logs", job_id, "-f", "--rank", 1).output == "rank 1 says hello\n" * 3


def test_keys_are_made_and_listed_through_the_api(
    run: CliRunnerCall, auth_on: Settings, session: Session
) -> None:
    root = create_key(session, "root", admin=True)
    made = run("--token", root, "keys", "create", "--user", "grace", "--admin")
    assert made.exit_code == 0, made.output
    grace = made.output.strip()
    assert caller_for_token(session, grace) == Caller("grace", is_admin=True)
    listed = run("--token", grace, "keys", "ls").output
    assert "root" in listed and "grace" in listed and grace not in listed
    alice = run("--token", grace, "keys", "create", "--user", "alice").output.strip()
    refused = run("--token", alice, "keys", "create", "--user", "mallory", "--admin")
    assert refused.exit_code == 1
    assert (
        "only an admin may make API keys" in refused.output
        and "(HTTP 403 at http://testserver, from TRAINYARD_URL)" in refused.output
    )
    bad = run("--token", root, "keys", "create", "--user", "no spaces")
    assert bad.exit_code == 1 and "user: user 'no spaces' is not a valid name" in bad.output


def test_keys_are_revoked_through_the_api(run: CliRunnerCall, auth_on: Settings, session: Session) -> None:
    root = create_key(session, "root", admin=True)
    alice = create_key(session, "alice", admin=False)
    [alice_id] = [key.id for key in list_keys(session, "alice")]
    revoked = run("--token", root, "keys", "revoke", alice_id)
    assert revoked.exit_code == 0, revoked.output
    assert f"revoked key {alice_id}" in revoked.output
    assert caller_for_token(session, alice) is None
    missing = run("--token", root, "keys", "revoke", alice_id)
    assert missing.exit_code == 1 and "(HTTP 404 at http://testserver, from TRAINYARD_URL)" in missing.output


def test_gpus_lists_every_host_with_its_address_and_status(run: CliRunnerCall) -> None:
    assert "no worker host has registered" in run("gpus").output
    stale = utcnow() - timedelta(hours=1)
    with session_scope() as session:
        session.add(Worker(id="a:1", host="box-a", address="10.0.0.1", gpus=[{"index": 0, "name": "H200"}]))
        session.add(Worker(id="b:1", host="box-b", address="10.0.0.2", gpus=[], heartbeat_at=stale))
    lines = run("gpus").output.splitlines()
    assert any("box-a" in line and "10.0.0.1" in line and "up" in line and "free" in line for line in lines)
    assert any("box-b" in line and "10.0.0.2" in line and "down" in line for line in lines)


def test_ls_shows_what_each_job_ran_and_why_a_failed_one_failed(run: CliRunnerCall, tmp_path: Path) -> None:
    run("submit", spec_file(tmp_path, name="broken"))
    set_job(1, status=JobStatus.FAILED, status_reason="exception", message="ValueError: no data", gpu_ids=[3])
    run("submit", spec_file(tmp_path, name="fine", precision="bf16"))
    set_job(2, status=JobStatus.SUCCEEDED, latest_metrics={"eval_accuracy": 0.9375}, gpu_ids=[0, 1])
    listed = run("ls").output
    assert "exception: ValueError: no data" in listed
    assert "1 GPU [3]" in listed and "2 GPUs [0, 1]" in listed
    assert "0.9375" in listed and "single" in listed and "bf16" in listed


def test_compare_shows_tokens_mfu_and_perplexity_for_language_models(
    run: CliRunnerCall, client: TestClient
) -> None:
    lm, image = submit(client, name="gpt")["id"], submit(client, name="cnn")["id"]
    with session_scope() as session:
        for step, tokens, mfu in ((10, 9000.0, 0.30), (20, 11000.0, 0.40), (30, 10000.0, 0.35)):
            session.add(Metric(job_id=lm, name="tokens_per_s", step=step, value=tokens))
            session.add(Metric(job_id=lm, name="mfu", step=step, value=mfu))
        session.add(Metric(job_id=lm, name="eval_perplexity", step=30, value=12.5))
    compared = {row[0]: row[1:] for row in table_rows(run("compare", lm, image).output)}
    assert [compared[name] for name in ("tokens/s", "MFU", "eval ppl")] == [
        ["10,000", "-"],
        ["0.35", "-"],
        ["12.5", "-"],
    ]
    assert "tokens/s" not in run("compare", image).output, "only where a job has them"

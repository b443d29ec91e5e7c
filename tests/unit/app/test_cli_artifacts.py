"""The verbs for what a job leaves behind, against the real app in-process with the job's files planted as its
rank 0 writes them: delete, events, checkpoints (ls, download), export, tensorboard, profile, usage."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.services.keys import LOCAL_USER
from core.config import Settings
from core.models import Checkpoint, utcnow
from jobspec.events import TENSORBOARD_DIR
from jobspec.hf_files import EXPORT_FILE
from jobspec.profile_summary import PROFILE_DIR, SUMMARY_FILE, TRACE_FILE
from tests.unit.app.table_rows import table_rows
from tests.unit.app.test_profile_api import SUMMARY
from tests.unit.conftest import submit
from worker.executors.local.telemetry import charge

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder, where downloads land by default."""
    folder = tmp_path / "here"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_delete_refuses_an_unfinished_job_and_events_show_its_history(
    run: CliRunnerCall, client: TestClient
) -> None:
    job_id = submit(client)["id"]
    refused = run("delete", job_id)
    assert (
        refused.exit_code == 1
        and "cancel it first" in refused.output
        and "(HTTP 409 at http://testserver, from TRAINYARD_URL)" in refused.output
    )
    run("cancel", job_id)
    history = table_rows(run("events", job_id).output)
    assert [row[1:5] for row in history] == [
        ["-", "queued", "0", "submitted"],
        ["queued", "cancelled", "0", "cancelled_by_user"],
    ]
    assert run("delete", job_id).output.strip() == f"deleted job {job_id}"
    assert "does not exist" in run("events", job_id).output


def test_checkpoints_are_listed_and_downloaded(
    run: CliRunnerCall, client: TestClient, session: Session, settings: Settings, here: Path
) -> None:
    job_id = submit(client)["id"]
    path = settings.runs_dir / str(job_id) / "checkpoints" / "step-10.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00weights\xff" * 1000)
    session.add(Checkpoint(job_id=job_id, step=10, epoch=1, path=str(path), size_bytes=9000))
    session.commit()
    [row] = table_rows(run("checkpoints", "ls", job_id).output)
    checkpoint_id = int(row[0])
    assert row[1:4] == ["10", "1", "8.8 KiB"]
    saved = run("checkpoints", "download", checkpoint_id)
    assert saved.exit_code == 0, saved.output
    name = f"job{job_id}-step10-step-10.pt"
    assert saved.output.strip() == f"saved {name} (8.8 KiB)"
    assert (here / name).read_bytes() == path.read_bytes()
    assert run("checkpoints", "download", checkpoint_id, "-o", "../best.pt").exit_code == 0
    assert (here.parent / "best.pt").read_bytes() == path.read_bytes()
    nowhere = run("checkpoints", "download", checkpoint_id, "-o", "absent/best.pt")
    assert nowhere.exit_code == 2 and "absent is not a folder; make it first" in nowhere.output
    missing = run("checkpoints", "download", 999)
    assert missing.exit_code == 1 and "(HTTP 404 at http://testserver, from TRAINYARD_URL)" in missing.output
    assert sorted(p.name for p in here.iterdir()) == [name], "a refused download leaves no file"


def test_export_tensorboard_and_profile_download(
    run: CliRunnerCall, client: TestClient, settings: Settings, here: Path
) -> None:
    job_id = submit(client, metrics={"tensorboard": True}, profile={"steps": 3, "skip_first": 5})["id"]
    run_dir = settings.runs_dir / str(job_id)
    nothing = run("export", job_id)
    assert nothing.exit_code == 1 and f"job {job_id} has no export" in nothing.output
    (run_dir / TENSORBOARD_DIR).mkdir(parents=True)
    (run_dir / TENSORBOARD_DIR / "events.out.tfevents.1.host").write_bytes(b"scalars")
    (run_dir / EXPORT_FILE).write_bytes(b"a tar of config.json")
    digest = hashlib.sha256(b"a tar of config.json").hexdigest()
    (run_dir / f"{EXPORT_FILE}.sha256").write_text(f"{digest}  {EXPORT_FILE}\n")
    (run_dir / PROFILE_DIR).mkdir()
    (run_dir / PROFILE_DIR / SUMMARY_FILE).write_text(SUMMARY.model_dump_json())
    (run_dir / PROFILE_DIR / TRACE_FILE).write_text(json.dumps({"traceEvents": []}))

    assert run("export", job_id).exit_code == 0
    assert (here / f"job{job_id}-export.tar").read_bytes() == b"a tar of config.json"
    assert run("tensorboard", job_id, "-o", here / "board.tar").exit_code == 0
    with tarfile.open(fileobj=io.BytesIO((here / "board.tar").read_bytes())) as tar:
        assert tar.getnames() == [f"job{job_id}/events.out.tfevents.1.host"]
    profiled = run("profile", job_id)
    assert profiled.exit_code == 0, profiled.output
    assert json.loads((here / f"job{job_id}-trace.json").read_text()) == {"traceEvents": []}
    lines = profiled.output.splitlines()
    assert lines[1] == (
        "3 steps from step 6 on cuda: 0.9 ms a step; host-device copies 20% of GPU time; waits for the GPU "
        "5% of CPU time"
    )
    assert "Memcpy HtoD" in lines[2]
    as_json = run("profile", job_id, "-o", here / "again.json", "--output", "json")
    assert json.loads(as_json.stdout) == client.get(f"/v1/jobs/{job_id}/profile").json()
    assert as_json.stderr.startswith(f"saved {here / 'again.json'} ("), "where it went, off stdout"


def test_usage_lists_recent_use(run: CliRunnerCall, session: Session, settings: Settings) -> None:
    assert run("usage").output.strip() == "no job has run lately"
    charge(session, LOCAL_USER, 2.5 * 3600, 0.0, utcnow(), settings)
    session.commit()
    shown = run("usage").output
    assert table_rows(shown) == [[LOCAL_USER, "2.50", "0.00"]]
    assert shown.rstrip().endswith("use counts half after 24 h")

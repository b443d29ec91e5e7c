"""Listings in an 80-column terminal: id, name, status and progress whole, no line past 80, free text
shortened with "…", the least important columns dropped; `--wide` shows them all, `--output json` the API's
answer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.cli.table import FREE_TEXT_MIN, Column, layout
from app.services.keys import LOCAL_USER
from core.config import Settings
from core.db import session_scope
from core.keys import create_key
from core.models import Checkpoint, Job, Metric, Worker, utcnow
from core.states import JobStatus
from tests.unit.app.table_rows import table_rows
from tests.unit.conftest import submit
from worker.executors.local.telemetry import charge

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]

NAMES = ("resnet50-cifar10-bf16-ddp-4gpu", "gpt2-small-fineweb-fsdp")
REASON = "waiting for 4 GPUs on one host: box-a has 2 free (GPUs 0, 1 held by job 7 of alice until it ends)"


@pytest.fixture
def narrow(run: CliRunnerCall) -> CliRunnerCall:
    run.columns(80)
    return run


def fits(output: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in output.splitlines())


def set_job(job_id: int, **values: object) -> None:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(**values))


def two_jobs(client: TestClient) -> tuple[int, int]:
    first, second = (submit(client, name=name)["id"] for name in NAMES)
    return first, second


def test_layout_shortens_free_text_then_drops_the_least_important() -> None:
    columns = [
        Column("id"),
        Column("name"),
        Column("owner", rank=2),
        Column("wants", rank=3),
        Column("reason", rank=1, free_text=True),
    ]
    natural = [4, 30, 10, 12, 60]
    chrome = 3 * len(columns) + 1
    assert layout(columns, natural, sum(natural) + chrome) == dict(enumerate(natural))
    # Ten too few: the reason gives them up, and nothing is dropped.
    assert layout(columns, natural, sum(natural) + chrome - 10) == {0: 4, 1: 30, 2: 10, 3: 12, 4: 50}
    # The reason at its least still too wide with every column: wants goes, and the reason has what is left.
    assert layout(columns, natural, 80) == {0: 4, 1: 30, 2: 10, 4: 80 - (4 + 30 + 10) - 3 * 4 - 1}
    assert layout(columns, natural, 60) == {0: 4, 1: 30, 4: 60 - (4 + 30) - 3 * 3 - 1}
    # Room for the essential columns alone: they stay whole even so.
    assert layout(columns, natural, 20) == {0: 4, 1: 30}
    assert layout(columns, [4, 30, 10, 12, 5], 60)[4] == 5 < FREE_TEXT_MIN, "short text is never padded"


def test_ls_at_80_columns_keeps_ids_names_status_and_progress_whole(
    narrow: CliRunnerCall, client: TestClient
) -> None:
    first, second = two_jobs(client)
    set_job(first, status=JobStatus.FAILED, status_reason="exception", message=REASON, progress_total=1000)
    set_job(second, status=JobStatus.RUNNING, progress_step=1234, progress_total=20000)
    listed = narrow("ls").output
    assert fits(listed), listed
    rows = {row[0]: row for row in table_rows(listed)}
    assert rows[str(first)][:4] == [str(first), NAMES[0], "failed", "0/1000"]
    assert rows[str(second)][:4] == [str(second), NAMES[1], "running", "1234/20000"]
    assert rows[str(first)][-1].startswith("exception: w") and rows[str(first)][-1].endswith("…")
    assert "created" not in listed and "precision" not in listed
    wide = narrow("ls", "--wide").output
    assert "created" in wide and "precision" in wide and f"exception: {REASON}" in wide
    assert not fits(wide)


def cells_by_row(rows: list[list[str]], column: int) -> list[str]:
    """`column`'s text of each table row, its wrapped lines (rows whose first cell is empty) joined."""
    joined: list[str] = []
    for row in rows:
        if row[0]:
            joined.append(row[column])
        elif row[column]:
            joined[-1] += " " + row[column]
    return joined


def test_queue_wraps_reasons_within_80_columns_and_never_cuts_them(
    narrow: CliRunnerCall, client: TestClient
) -> None:
    first, second, third = (*two_jobs(client), submit(client, name="x" * 48)["id"])
    set_job(first, message=REASON)
    set_job(second, message="placed on box-a;\nstarting")
    set_job(third, message="Slurm job 4 is pending (PartitionNodeLimit)")
    queued = narrow("queue").output
    assert fits(queued), queued
    rows = table_rows(queued)
    heads = [row for row in rows if row[0]]
    assert [row[:2] for row in heads] == [["1", str(first)], ["2", str(second)], ["3", str(third)]]
    assert all(row[2].endswith("…") for row in heads), "long names give way to the reasons"
    assert cells_by_row(rows, -1) == [
        REASON,
        "placed on box-a; starting",
        "Slurm job 4 is pending (PartitionNodeLimit)",
    ]
    wide = narrow("queue", "--wide").output
    assert REASON in wide and len(table_rows(wide)) == 3, "one line per job with --wide"
    answer = json.loads(narrow("queue", "--output", "json").stdout)
    assert [(e["job_id"], e["reason"]) for e in answer["data"]] == [
        (first, REASON),
        (second, "placed on box-a;\nstarting"),
        (third, "Slurm job 4 is pending (PartitionNodeLimit)"),
    ]


def test_compare_diff_is_a_row_per_field_within_80_columns(narrow: CliRunnerCall, client: TestClient) -> None:
    first = submit(client, name=NAMES[0], train={"max_steps": 5, "batch_size": 8, "lr": 0.1})["id"]
    second = submit(client, name=NAMES[1], train={"max_steps": 7, "batch_size": 16, "lr": 0.05})["id"]
    set_job(first, status=JobStatus.SUCCEEDED)
    compared = narrow("compare", first, second, "--diff").output
    assert fits(compared), compared
    rows = table_rows(compared)
    assert rows[:2] == [["name", *NAMES], ["status", "succeeded", "queued"]]
    assert ["train.lr", "0.1", "0.05"] in rows and ["train.batch_size", "8", "16"] in rows
    assert f"┃ field            ┃ job {first} ┃ job {second} ┃" in compared
    answer = json.loads(narrow("compare", first, second, "--diff", "--output", "json").stdout)
    assert [job["name"] for job in answer["jobs"]] == list(NAMES)
    assert {d["field"] for d in answer["diff"]["differences"]} >= {"train.lr", "train.batch_size"}


def test_compare_at_80_columns_cuts_long_names_never_a_number(
    narrow: CliRunnerCall, client: TestClient, session: Session
) -> None:
    names = [f"{stem}-{'x' * (47 - len(stem))}" for stem in ("resnet50-ddp", "resnet50-fsdp", "vit-b16")]
    jobs = [submit(client, name=name)["id"] for name in names]
    for job_id, speed in zip(jobs, (123456.0, 98765.0, 4321.0), strict=True):
        for name, value in (
            ("samples_per_s", speed),
            ("loss", 0.001234),
            ("eval_accuracy", 0.9375),
            ("peak_mem_mb", 81234.0),
            ("gpu_util/0", 97.5),
            ("tokens_per_s", 1234567.0),
            ("mfu", 0.4512),
            ("eval_perplexity", 12.34),
        ):
            session.add(Metric(job_id=job_id, name=name, step=10, value=value))
    session.commit()
    compared = narrow("compare", *jobs).output
    assert fits(compared), compared
    rows = {row[0]: row[1:] for row in table_rows(compared)}
    assert all(len(name) == 48 for name in names)
    assert all(name.endswith("…") and names[i].startswith(name[:-1]) for i, name in enumerate(rows["name"]))
    assert rows["samples/s"] == ["123,456", "98,765", "4,321"]
    assert rows["final loss"] == ["0.001234"] * 3 and rows["eval acc"] == ["0.9375"] * 3
    assert rows["peak MB"] == ["81,234"] * 3 and rows["GPU util %"] == ["97.5"] * 3
    assert rows["tokens/s"] == ["1,234,567"] * 3 and rows["MFU"] == ["0.4512"] * 3
    assert rows["eval ppl"] == ["12.34"] * 3 and rows["wall"] == ["-"] * 3
    assert all(name in narrow("compare", *jobs, "--wide").output for name in names)
    answer = json.loads(narrow("compare", *jobs, "--output", "json").stdout)
    assert [job["name"] for job in answer["jobs"]] == names and answer["jobs"][0]["samples_per_s"] == 123456.0


def test_checkpoints_at_80_columns(
    narrow: CliRunnerCall, client: TestClient, session: Session, settings: Settings
) -> None:
    job_id = submit(client)["id"]
    for step in (1000, 250000):
        session.add(
            Checkpoint(job_id=job_id, step=step, epoch=step // 1000, path=f"/x/{step}.pt", size_bytes=9)
        )
    session.commit()
    listed = narrow("checkpoints", "ls", job_id).output
    assert fits(listed), listed
    ids = [
        c["id"] for c in json.loads(narrow("checkpoints", "ls", job_id, "--output", "json").stdout)["data"]
    ]
    assert [row[:2] for row in table_rows(listed)] == [[str(ids[0]), "1000"], [str(ids[1]), "250000"]]
    assert f"/v1/checkpoints/{ids[1]}/download" in narrow("checkpoints", "ls", job_id, "--wide").output


def test_code_bundles_at_80_columns_show_whole_ids(narrow: CliRunnerCall, tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "model.py").write_text("WIDTH = 8\n")
    bundle_id = narrow("code", "push", folder).stdout.strip()
    assert bundle_id.startswith("sha256:") and len(bundle_id) == len("sha256:") + len(
        hashlib.sha256().hexdigest()
    )
    listed = narrow("code", "ls").output
    assert fits(listed), listed
    assert [row[0] for row in table_rows(listed)] == [bundle_id]
    assert "owner" not in listed and "owner" in narrow("code", "ls", "--wide").output
    answer = json.loads(narrow("code", "ls", "--output", "json").stdout)
    assert [b["id"] for b in answer["data"]] == [bundle_id] and answer["count"] == 1


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("ls",), "name"),
        (("events", 1), "to_status"),
        (("metrics", 1), "value"),
        (("gpus",), "host"),
        (("usage",), "user"),
        (("keys", "ls"), "user"),
    ],
)
def test_every_listing_prints_the_api_answer_as_json(
    run: CliRunnerCall,
    client: TestClient,
    session: Session,
    settings: Settings,
    args: tuple[object, ...],
    key: str,
) -> None:
    job_id = submit(client, name=NAMES[0])["id"]
    session.add(Metric(job_id=job_id, name="loss", step=1, value=0.5))
    session.add(Worker(id="a:1", host="box-a", address="10.0.0.1", gpus=[{"index": 0, "name": "H200"}]))
    charge(session, LOCAL_USER, 3600.0, 0.0, utcnow(), settings)
    create_key(session, "ada", admin=False)
    session.commit()
    result = run(*args, "--output", "json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["data"] and all(key in row for row in answer["data"])

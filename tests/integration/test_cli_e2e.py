"""The `trainyard` console script as a user runs it, against the real service (embedded backend)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.integration.jobs import example_spec, wait_status
from tests.integration.servers import Stack
from tests.unit.app.table_rows import table_rows

TRAINYARD = Path(sys.executable).parent / "trainyard"
DDP = example_spec("digits_ddp_cpu.json", train={"epochs": 1}, checkpoint={"every_n_epochs": 0})
SINGLE = {**DDP, "name": "digits-single-cpu", "parallel": {"strategy": "single"}}
LONG = example_spec(
    "digits_ddp_cpu.json",
    data={"dataset": "synthetic", "num_samples": 4096, "image_size": 8, "val_fraction": 0.1},
    train={"epochs": None, "max_steps": 100000},
    checkpoint={"every_n_epochs": 0, "save_final": False},
) | {"name": "long"}


def trainyard(
    stack: Stack, *args: object, timeout: float = 120, columns: int = 200
) -> subprocess.CompletedProcess[str]:
    # As on a client machine: the API's URL, and no database (a URL that leads nowhere, should it be used).
    env = {
        **os.environ,
        "TRAINYARD_URL": stack.url,
        "TRAINYARD_DATABASE_URL": "postgresql+psycopg://nobody@db.invalid/none",
        "COLUMNS": str(columns),
    }
    return subprocess.run(
        [str(TRAINYARD), *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout
    )


def spec_file(tmp_path: Path, spec: dict[str, object]) -> Path:
    path = tmp_path / f"{spec['name']}.json"
    path.write_text(json.dumps(spec))
    return path


def job_id_of(submit_output: str) -> int:
    return int(submit_output.split()[1])  # "job 3 (name) queued: ..."


def test_cli_tour(embedded_stack: Stack, tmp_path: Path) -> None:
    ddp = trainyard(embedded_stack, "submit", spec_file(tmp_path, DDP), "--follow")
    assert ddp.returncode == 0, ddp.stdout + ddp.stderr
    ddp_id = job_id_of(ddp.stdout)
    assert ddp.stdout.rstrip().splitlines()[-1].startswith(f"job {ddp_id} succeeded")

    single = trainyard(embedded_stack, "submit", spec_file(tmp_path, SINGLE))
    single_id = job_id_of(single.stdout)
    assert trainyard(embedded_stack, "status", single_id, "--follow").returncode == 0

    listed = trainyard(embedded_stack, "ls", "--status", "succeeded").stdout
    assert "digits-ddp-cpu" in listed and "digits-single-cpu" in listed
    status = trainyard(embedded_stack, "status", ddp_id).stdout
    assert f"job {ddp_id} (digits-ddp-cpu): succeeded" in status and "ddp on cpu x2" in status

    losses = trainyard(embedded_stack, "metrics", ddp_id, "--name", "loss").stdout
    assert sum(" loss " in line for line in losses.splitlines()) >= 3
    live = trainyard(embedded_stack, "metrics", ddp_id, "-f", "--name", "eval_accuracy").stdout
    assert "eval_accuracy" in live and live.splitlines()[-1].startswith(f"job {ddp_id} succeeded")
    launcher = trainyard(embedded_stack, "logs", ddp_id)
    assert launcher.returncode == 0 and launcher.stdout.strip()
    assert trainyard(embedded_stack, "logs", ddp_id, "--rank", "1").returncode == 0

    # A row per quantity, a column per job, within 80 columns.
    compared = trainyard(embedded_stack, "compare", ddp_id, single_id, columns=80).stdout
    assert all(len(line) <= 80 for line in compared.splitlines()), compared
    rows = {row[0]: row[1:] for row in table_rows(compared)}
    assert [rows[name] for name in ("strategy", "precision", "devices")] == [
        ["ddp", "single"],
        ["fp32", "fp32"],
        ["cpu x2", "cpu x1"],
    ]
    assert all("-" not in rows[name] for name in ("samples/s", "final loss", "eval acc")), rows
    as_json = json.loads(trainyard(embedded_stack, "status", ddp_id, "--output", "json").stdout)
    assert as_json["id"] == ddp_id and as_json["status"] == "succeeded"

    missing = trainyard(embedded_stack, "status", 9999)
    assert missing.returncode == 1 and "job 9999 does not exist" in missing.stderr
    assert f"(HTTP 404 at {embedded_stack.url}, from TRAINYARD_URL)" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_cli_cancels_a_long_job(embedded_stack: Stack, tmp_path: Path) -> None:
    long_id = job_id_of(trainyard(embedded_stack, "submit", spec_file(tmp_path, LONG)).stdout)
    with embedded_stack.client() as client:
        wait_status(client, long_id, {"running"}, timeout=60)
        cancelled = trainyard(embedded_stack, "cancel", long_id)
        assert cancelled.returncode == 0 and f"job {long_id} cancel" in cancelled.stdout
        wait_status(client, long_id, {"cancelled"}, timeout=30)
    followed = trainyard(embedded_stack, "status", long_id, "--follow")
    assert followed.returncode == 1 and f"job {long_id} cancelled" in followed.stdout


def test_cli_makes_keys_through_the_api(auth_stack: Stack) -> None:
    admin = auth_stack.admin_key("cli-root")
    made = trainyard(auth_stack, "--token", admin, "keys", "create", "--user", "carol")
    assert made.returncode == 0, made.stderr
    carol = made.stdout.strip()
    assert trainyard(auth_stack, "--token", carol, "ls").returncode == 0
    listed = trainyard(auth_stack, "--token", admin, "keys", "ls").stdout
    assert "cli-root" in listed and "carol" in listed
    refused = trainyard(auth_stack, "--token", carol, "keys", "create", "--user", "mallory", "--admin")
    assert refused.returncode == 1 and "only an admin may make API keys" in refused.stderr
    assert "Traceback" not in refused.stderr

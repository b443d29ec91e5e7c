"""A job's forecast beside what it measured in `trainyard status`, and `trainyard forecast accuracy`, in an
80-column terminal and as JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from fastapi.testclient import TestClient

from core.states import JobStatus
from tests.unit.app.table_rows import table_rows
from tests.unit.app.test_api_forecast_accuracy import forecast, ran
from tests.unit.conftest import submit

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]


def fits(output: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in output.splitlines())


def test_status_shows_the_forecast_then_what_was_measured(run: CliRunnerCall, client: TestClient) -> None:
    run.columns(80)
    job_id = submit(client, name="x" * 48)["id"]
    ran(job_id, {}, JobStatus.RUNNING, forecast=forecast(10.0, 0.2), device="cuda")
    shown = run("status", job_id).output
    assert fits(shown), shown
    assert (
        "  forecast: peak 10.0 GiB of 140.0 GiB, fits, step 0.2 s, job 0:20, basis:\n"
        "            fitted on an H200 (bench.forecast, 13 configurations)\n"
    ) in shown, "the figures on one line, the basis wrapped under them"
    assert "measured:" not in shown, "nothing measured yet"

    ran(job_id, {"peak_reserved_mb": 8 * 1024, "step_time_s": 0.25}, forecast=forecast(10.0, 0.2))
    shown = run("status", job_id).output
    assert fits(shown), shown
    assert "  measured: peak 8.0 GiB (forecast 1.25x), step 0.25 s (forecast 0.80x)\n" in shown


def test_status_says_why_a_job_has_no_forecast(run: CliRunnerCall, client: TestClient) -> None:
    job_id = submit(client)["id"]
    ran(job_id, {}, forecast_note="a program builds its own model")
    assert "  forecast: none: a program builds its own model\n" in run("status", job_id).output


def test_forecast_accuracy_at_80_columns_and_as_json(run: CliRunnerCall, client: TestClient) -> None:
    assert "no finished job of yours" in run("forecast", "accuracy").output
    run.columns(80)
    names = ("llama-1b-lora-fineweb-fsdp-bf16-batch8", "resnet50")
    first, second = (submit(client, name=name)["id"] for name in names)
    ran(
        first,
        {"peak_reserved_mb": 8 * 1024, "step_time_s": 0.25},
        forecast=forecast(10.0, 0.2),
        device="cuda",
    )
    ran(second, {"peak_mem_mb": 1024, "step_time_s": 0.1}, forecast=forecast(1.0, 0.1))

    shown = run("forecast", "accuracy").output
    assert fits(shown), shown
    rows = table_rows(shown)
    assert [row[0] for row in rows] == [str(second), str(first)]
    assert rows[1][-6:] == ["10.0", "8.0", "1.25x", "0.2", "0.25", "0.80x"]
    assert rows[1][1].endswith("…"), "a long name gives way to the figures"
    assert "2 jobs; forecast / measured, median: peak 1.12x (1 within 10 %), step 0.90x" in " ".join(
        shown.split()
    )

    answer = json.loads(run("forecast", "accuracy", "--limit", "1", "--output", "json").stdout)
    assert [row["job_id"] for row in answer["data"]] == [second] and answer["summary"]["jobs"] == 1

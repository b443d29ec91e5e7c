"""The experiment record from a terminal: logs default to rank 0's, and `compare --diff` shows how specs
differ as the API works it out, a row per field."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi.testclient import TestClient
from sqlalchemy import update

from app.services.runs import log_path
from core.config import Settings
from core.db import session_scope
from core.models import Job
from core.states import JobStatus
from tests.unit.app.table_rows import table_rows
from tests.unit.conftest import submit

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]


def test_logs_show_rank_0_unless_the_launcher_is_asked_for(
    run: CliRunnerCall, client: TestClient, settings: Settings
) -> None:
    job_id = submit(client)["id"]
    for rank, text in ((None, "=== attempt 1 node 0: torchrun ...\n"), (0, "step 5/10 loss=0.5\n")):
        path = log_path(settings, job_id, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.SUCCEEDED))
    assert run("logs", job_id).output == "step 5/10 loss=0.5\n"
    assert run("logs", job_id, "--launcher").output == "=== attempt 1 node 0: torchrun ...\n"
    both = run("logs", job_id, "--launcher", "--rank", 1)
    assert both.exit_code == 2 and "--rank and --launcher name two different logs" in both.output


def test_compare_diff_adds_a_row_per_field_that_differs(run: CliRunnerCall, client: TestClient) -> None:
    fast = submit(client, name="lr-high", train={"max_steps": 5, "batch_size": 8, "lr": 0.1})["id"]
    slow = submit(client, name="lr-low", train={"max_steps": 5, "batch_size": 8, "lr": 0.05})["id"]
    plain = run("compare", fast, slow).output
    assert "train.lr" not in plain
    compared = run("compare", fast, slow, "--diff").output
    assert f"┃ field    ┃ job {fast} ┃ job {slow} ┃" in compared
    assert table_rows(compared)[-1] == ["train.lr", "0.1", "0.05"]

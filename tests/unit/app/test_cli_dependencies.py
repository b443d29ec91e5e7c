"""`trainyard submit --depends-on` and what `status` and `queue` say of a job that waits for others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tests.unit.conftest import job_body

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]


def test_submit_depends_on_and_status_and_queue_say_what_it_waits_for(
    run: CliRunnerCall, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(job_body(name="pretrain")))
    assert run("submit", spec).exit_code == 0
    waiting = run("submit", spec, "--depends-on", "1", "--output", "json")
    assert waiting.exit_code == 0, waiting.output
    assert json.loads(waiting.stdout)["job"]["spec"]["depends_on"] == [1]
    status = run("status", 2).output
    assert "depends:  job 1" in status
    assert "reason:   waiting_for_jobs" in status
    assert "waiting for job 1 to succeed (depends_on)" in status
    assert "waiting for job 1 to succeed" in run("queue").output
    bad = run("submit", spec, "--depends-on", "1,x")
    assert bad.exit_code == 2 and "comma-separated" in bad.output
    missing = run("submit", spec, "--depends-on", "9")
    assert missing.exit_code == 1 and "depends_on: job 9 does not exist" in missing.output

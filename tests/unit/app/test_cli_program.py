"""A program job through the `trainyard` commands: `submit --code DIR` pushes the script, `status` shows its
argv and hyperparameters, and `compare --diff` shows a hyperparameter that differs as a row of its own."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.unit.app.table_rows import table_rows

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]


def submitted(run: CliRunnerCall, tmp_path: Path, name: str, hyperparameters: dict[str, Any]) -> int:
    code = tmp_path / "bundle"
    if not code.is_dir():  # pushed once: the same bytes make the same bundle
        code.mkdir()
        (code / "train.py").write_text("print('hi')\n")
    spec = {
        "name": name,
        "program": {"entrypoint": ["python", "train.py", "--lr", "3e-4"], "hyperparameters": hyperparameters},
        "train": {"max_steps": 5},
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(spec))
    result = run("submit", path, "--code", code)
    assert result.exit_code == 0, result.output
    match = re.search(r"job (\d+)", result.output)
    assert match, result.output
    return int(match[1])


def test_status_shows_the_program_and_compare_names_its_hyperparameters(
    run: CliRunnerCall, tmp_path: Path
) -> None:
    first = submitted(run, tmp_path, "warm", {"lr": 3e-4, "warmup": 100})
    second = submitted(run, tmp_path, "cold", {"lr": 3e-4, "warmup": 0})
    status = run("status", first).output
    assert "program:  python train.py --lr 3e-4 (lr 0.0003, warmup 100)" in status
    assert "per-rank batch" not in status, "the script picks its own batch"
    compared = run("compare", first, second, "--diff").output
    assert table_rows(compared)[-1] == ["program.hyperparameters.warmup", "100", "0"]

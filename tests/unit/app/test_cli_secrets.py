"""`trainyard secret set|ls|rm`: the value comes from stdin, never argv, and no command prints it; a listing
fits 80 columns and `--output json` gives the API's answer."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from app.cli import cli
from core.config import Settings, get_settings
from core.secrets import new_key

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]

VALUE = "ghp_cli-secret-value-123"


@pytest.fixture
def keyed(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_SECRETS_KEY", new_key())
    get_settings.cache_clear()


def test_set_reads_stdin_and_nothing_shows_the_value(keyed: None, run: CliRunnerCall) -> None:
    made = CliRunner(env=run.env).invoke(cli, ["secret", "set", "gh-token"], input=VALUE + "\n")
    assert made.exit_code == 0, made.output
    assert "gh-token" in made.output and VALUE not in made.output
    run.columns(80)
    listed = run("secret", "ls")
    assert "gh-token" in listed.output and VALUE not in listed.output
    assert all(len(line) <= 80 for line in listed.output.splitlines())
    answer = json.loads(run("secret", "ls", "--output", "json").output)
    assert [s["name"] for s in answer["data"]] == ["gh-token"] and "value" not in answer["data"][0]
    assert run("secret", "rm", "gh-token").exit_code == 0
    assert json.loads(run("secret", "ls", "--output", "json").output) == {"data": []}


def test_a_value_on_the_command_line_is_not_taken(keyed: None, run: CliRunnerCall) -> None:
    refused = CliRunner(env=run.env).invoke(cli, ["secret", "set", "x", VALUE], input="")
    assert refused.exit_code != 0 and "unexpected extra argument" in refused.output.lower()

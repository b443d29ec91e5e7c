"""The `trainyard` command against the real app in-process, only the HTTP connection swapped (load with
`pytest_plugins`): the `run` fixture invokes it as a terminal would, TRAINYARD_URL set as a user sets it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

import app.cli
from app.cli import cli, follow
from app.cli.render import console
from app.client import TrainyardClient

# What errors name as the API's URL: TestClient's own base URL.
TEST_URL = "http://testserver"


class CliRunnerCall:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.env = {"TRAINYARD_URL": TEST_URL}
        self.columns(200)

    def columns(self, width: int) -> None:
        """A terminal `width` columns wide, as COLUMNS tells rich: the shared console read COLUMNS once, at
        import, so it is told too; consoles made while a command runs read it themselves."""
        self.env["COLUMNS"] = str(width)
        self.monkeypatch.setattr(console, "width", width)

    def __call__(self, *args: object) -> Result:
        return CliRunner(env=self.env).invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture
def run(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> CliRunnerCall:
    # Each command closes its client when it ends, so each gets a fresh in-process connection to the app.
    monkeypatch.setattr(
        app.cli,
        "TrainyardClient",
        lambda url, token: TrainyardClient(token=token, http=TestClient(client.app)),
    )
    monkeypatch.setattr(follow, "POLL_S", 0.05)
    return CliRunnerCall(monkeypatch)

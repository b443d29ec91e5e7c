"""The `trainyard` command against the real app in-process, only the HTTP connection swapped (load with
`pytest_plugins`): the `run` fixture invokes it as a terminal would."""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

import app.cli
from app.cli import cli, follow
from app.cli.render import console
from app.client import TrainyardClient


class CliRunnerCall:
    def __call__(self, *args: object) -> Result:
        return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture
def run(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> CliRunnerCall:
    # Each command closes its client when it ends, so each gets a fresh in-process connection to the app.
    monkeypatch.setattr(
        app.cli,
        "TrainyardClient",
        lambda url, token: TrainyardClient(token=token, http=TestClient(client.app)),
    )
    monkeypatch.setattr(console, "width", 200)
    monkeypatch.setattr(follow, "POLL_S", 0.05)
    return CliRunnerCall()

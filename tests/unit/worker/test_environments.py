"""Named Python environments: the admin registers them, a spec picks one, the ranks run its interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core.config import Settings, get_settings
from core.launch import Launch
from tests.unit.conftest import assert_problem, job_body
from worker.executors.local.warm.launcher import WarmLauncher


@pytest.fixture
def registered(settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    monkeypatch.setenv("TRAINYARD_ENVIRONMENTS", f"torch-nightly={tmp_path / 'nightly'}, plain=/opt/venv")
    get_settings.cache_clear()
    return get_settings()


def test_registered_environments_name_their_interpreters(registered: Settings, tmp_path: Path) -> None:
    assert registered.environment_pythons == {
        "torch-nightly": str(tmp_path / "nightly" / "bin" / "python"),
        "plain": "/opt/venv/bin/python",
    }


def test_a_malformed_registration_says_how_to_write_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_ENVIRONMENTS", "nightly")
    with pytest.raises(ValueError, match="name=/path/to/venv"):
        Settings()


def test_a_spec_may_pick_only_a_registered_environment(registered: Settings, client: TestClient) -> None:
    assert client.post("/v1/jobs", json=job_body(environment="plain")).status_code == 201
    refused = client.post("/v1/jobs", json=job_body(environment="conda"))
    assert_problem(refused, "environment", "registered: plain, torch-nightly")


def test_the_standby_serves_only_its_own_interpreter(tmp_path: Path) -> None:
    launcher = WarmLauncher(sys.executable, Path.cwd())
    launcher.prepare()
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "-m", "json.tool"]
    other = Launch(["/opt/venv/bin/python", *torchrun], {})
    try:
        with pytest.raises(FileNotFoundError):  # started cold with the job's interpreter, absent here
            launcher.start(other, tmp_path / "launcher.log")
    finally:
        launcher.close()

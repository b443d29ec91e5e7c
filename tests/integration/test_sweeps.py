"""Sweeps end to end: a sweep survives its API and worker being killed mid-way (a stack of its own), with
exactly max_trials trials, none made twice."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.servers import ROOT, Stack

EXAMPLE = json.loads((ROOT / "examples" / "sweep_digits_lr.json").read_text())


def create(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/sweeps", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def wait_done(client: httpx.Client, sweep_id: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    sweep: dict[str, Any] = {}
    while time.monotonic() < deadline:
        sweep = client.get(f"/v1/sweeps/{sweep_id}").json()
        if sweep["status"] != "running":
            return sweep
        time.sleep(0.5)
    raise AssertionError(f"sweep {sweep_id} still running: {sweep}")


def trials(client: httpx.Client, sweep_id: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = client.get(f"/v1/sweeps/{sweep_id}/trials").json()["data"]
    return rows


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    stack = Stack.embedded(Path(tmp_path_factory.mktemp("sweep-restart")))
    yield stack
    stack.stop()


def test_a_sweep_survives_its_api_and_worker_killed(own_stack: Stack) -> None:
    spec = {**EXAMPLE["spec"], "train": {**EXAMPLE["spec"]["train"], "epochs": 1, "batch_size": 32}}
    body = {**EXAMPLE, "spec": spec, "max_trials": 6, "parallel": 2, "pruner": "none", "pruner_options": {}}
    with own_stack.client() as client:
        sweep = create(client, body)
        deadline = time.monotonic() + 60
        while sum(t["state"] != "running" for t in trials(client, sweep["id"])) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    for name in ("api", "worker"):
        own_stack.procs[name].kill()
        own_stack.procs[name].wait()
    own_stack.start_worker()
    own_stack.start_api()
    with own_stack.client() as client:
        done = wait_done(client, sweep["id"], 120)
        rows = trials(client, sweep["id"])
    assert done["status"] == "completed"
    assert [t["number"] for t in rows] == list(range(6))
    assert own_stack.sql(f"SELECT count(*) FROM jobs WHERE sweep_id = {sweep['id']}") == 6
    assert own_stack.sql(f"SELECT count(DISTINCT trial) FROM jobs WHERE sweep_id = {sweep['id']}") == 6
    assert all(t["state"] == "completed" for t in rows), rows

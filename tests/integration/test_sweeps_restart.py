"""A sweep survives its API and its worker killed mid-sweep, on a stack of its own with short leases: the
killed worker's trials are requeued and the sweep completes with each trial once."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.servers import SHORT_LEASE, Stack
from tests.integration.test_sweeps import EXAMPLE, create, trials, wait_done

pytestmark = pytest.mark.own_services

# Two at a time: two have completed when the worker is killed, the two it runs then are requeued, and the
# fifth is first asked for by the new API; a sixth would only repeat the fifth's life.
TRIALS = 5


@pytest.fixture(scope="module")
def own_stack(
    tmp_path_factory: pytest.TempPathFactory, stopping: list[subprocess.Popen[bytes]]
) -> Iterator[Stack]:
    # Short leases: the killed worker's trials are requeued within seconds of the new worker's start.
    stack = Stack.embedded(Path(tmp_path_factory.mktemp("sweep-restart")), **SHORT_LEASE)
    yield stack
    stopping += stack.terminate()


def test_a_sweep_survives_its_api_and_worker_killed(own_stack: Stack) -> None:
    spec = {**EXAMPLE["spec"], "train": {**EXAMPLE["spec"]["train"], "epochs": 1, "batch_size": 32}}
    body = {
        **EXAMPLE,
        "spec": spec,
        "max_trials": TRIALS,
        "parallel": 2,
        "pruner": "none",
        "pruner_options": {},
    }
    with own_stack.client() as client:
        sweep = create(client, body)
        deadline = time.monotonic() + 240  # two trials' starts: torch's imports on a loaded box
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
    assert [t["number"] for t in rows] == list(range(TRIALS))
    assert own_stack.sql(f"SELECT count(*) FROM jobs WHERE sweep_id = {sweep['id']}") == TRIALS
    assert own_stack.sql(f"SELECT count(DISTINCT trial) FROM jobs WHERE sweep_id = {sweep['id']}") == TRIALS
    assert all(t["state"] == "completed" for t in rows), rows

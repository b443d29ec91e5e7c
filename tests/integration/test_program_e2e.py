"""Program jobs through the whole service (embedded stack, 2 gloo ranks): examples/program_ddp, a plain
PyTorch DDP script reporting through trainyard.job, shows its metrics and checkpoints, stops on cancel after
a final checkpoint, and restarts after a SIGKILLed rank from its latest checkpoint with no step twice or
missed; a script using nothing of Trainyard succeeds with its logs, and its cancel leaves no process."""

from __future__ import annotations

import io
import json
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.integration.jobs import PACED, job_processes, metric_values, submit, wait_status
from tests.integration.servers import ROOT, Stack
from tests.integration.test_cli_e2e import trainyard
from tests.integration.test_faults_restart import hit_rank_at_step_50, runs_dir, wait_step

pytestmark = pytest.mark.integration

EXAMPLE = ROOT / "examples" / "program_ddp"
SPEC: dict[str, Any] = json.loads((EXAMPLE / "spec.json").read_text())


def push(stack: Stack, folder: Path) -> str:
    pushed = trainyard(stack, "code", "push", folder)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    return pushed.stdout.strip().splitlines()[-1]


def program(code: str, max_steps: int, **sections: Any) -> dict[str, Any]:
    return {**SPEC, "code": code, "train": {"max_steps": max_steps}, **sections}


@pytest.fixture(scope="module")
def example(embedded_stack: Stack) -> str:
    return push(embedded_stack, EXAMPLE)


def test_metrics_and_checkpoints_arrive_and_download(embedded_stack: Stack, example: str) -> None:
    with embedded_stack.client() as client:
        job_id = submit(client, program(example, 40))["id"]
        job = wait_status(client, job_id, {"succeeded"})
        assert job["spec"]["program"]["hyperparameters"] == {"lr": 0.05}
        assert (job["progress"]["step"], job["progress"]["total"]) == (40, 40)
        assert [step for step, _ in metric_values(client, job_id, "loss")] == list(range(5, 41, 5))
        checkpoints = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
        assert [c["step"] for c in checkpoints] == [30, 40], "keep_last 2 of every 10 steps"
        download = client.get(f"/v1/checkpoints/{checkpoints[-1]['id']}/download")
        assert download.status_code == 200
        assert torch.load(io.BytesIO(download.content), weights_only=True)["step"] == 40


def test_cancel_stops_after_a_final_checkpoint(embedded_stack: Stack, example: str) -> None:
    spec = program(example, 1_000_000, checkpoint={"every_n_steps": 0, "every_n_epochs": 0})
    with embedded_stack.client() as client:
        job_id = submit(client, spec)["id"]
        wait_step(embedded_stack, job_id, 20)
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        wait_status(client, job_id, {"cancelled"})
        checkpoints = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    # No checkpoint was due by the spec: the one there is the final one, written on the worker's SIGTERM.
    assert len(checkpoints) == 1 and checkpoints[0]["step"] >= 20, checkpoints
    assert not job_processes(runs_dir(embedded_stack), job_id)


def test_a_killed_rank_restarts_from_the_latest_checkpoint(embedded_stack: Stack) -> None:
    # The example's script, each step 20 ms asleep (tests/integration/bundles/paced/train.py): rank 1 is
    # killed at step 50 of 300, long before the end, with little of the cores spent on the steps.
    entrypoint = ["python", "train.py", "--delay", "0.02"]
    code = push(embedded_stack, PACED)
    spec = program(code, 300, limits={"max_restarts": 1}, program={"entrypoint": entrypoint})
    job, events, _ = hit_rank_at_step_50(embedded_stack, spec, signal.SIGKILL)
    assert job["attempt"] == 2, job
    assert [e["to_status"] for e in events].count("restarting") == 1
    with embedded_stack.client() as client:
        steps = [step for step, _ in metric_values(client, job["id"], "loss")]
    assert steps == list(range(5, 301, 5)), "a step reported twice or missed"


def test_a_script_using_nothing_of_trainyard_runs_and_its_cancel_leaves_no_process(
    embedded_stack: Stack, tmp_path: Path
) -> None:
    (tmp_path / "plain.py").write_text(
        "import os, sys, time\n"
        "print('plain rank', os.environ['RANK'], sys.argv[1:], flush=True)\n"
        "time.sleep(float(sys.argv[1]))\n"
    )
    code = push(embedded_stack, tmp_path)
    with embedded_stack.client() as client:
        done = submit(client, program(code, 1, program={"entrypoint": ["python", "plain.py", "0"]}))["id"]
        forever = submit(client, program(code, 1, program={"entrypoint": ["python", "plain.py", "3600"]}))[
            "id"
        ]
        assert wait_status(client, done, {"succeeded"})["status"] == "succeeded"
        log = client.get(f"/v1/jobs/{done}/logs", params={"rank": 1}).json()["text"]
        assert "plain rank 1 ['0']" in log
        wait_status(client, forever, {"running"})
        assert client.post(f"/v1/jobs/{forever}/cancel").status_code == 202
        wait_status(client, forever, {"cancelled"})
    assert not job_processes(runs_dir(embedded_stack), forever)

"""Stalls and stacks through the whole service (embedded stack, 2 gloo ranks): a program job whose rank 1
sleeps before an all_reduce that rank 0 has entered ends failed/stalled soon after limits.stall_timeout_s,
its stacks showing rank 0 in the collective and rank 1 in its sleep, with no process left; with
max_restarts 1 it restarts once from its checkpoint first. Stacks on demand from a running built-in job
(its ranks perhaps forked from the warm standby) and from a sandboxed bundle job."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.jobs import PACED, TERMINAL, job_processes, submit, wait_status
from tests.integration.servers import Stack
from tests.integration.test_cli_e2e import LONG, trainyard
from tests.integration.test_faults_restart import runs_dir, wait_step
from tests.integration.test_program_e2e import program, push

pytestmark = pytest.mark.integration

STALL = Path(__file__).with_name("bundles") / "stall"
# Waited out once per attempt with the ranks asleep, so short; long enough that a loaded box's healthy steps 1
# and 2 (a checkpoint, a tiny all_reduce) are never judged a stall (held at a load of 40 on two cores).
TIMEOUT_S = 10
# After the limit: the next look (0.5 s), the capture (the ranks dump at once), SIGKILL, and the end's
# transaction, on a box whose other tests load both cores.
SLACK_S = 12


def stalling(code: str, max_restarts: int) -> dict[str, Any]:
    return program(
        code,
        10,
        program={"entrypoint": ["python", "train.py"]},
        checkpoint={"every_n_steps": 2, "every_n_epochs": 0, "keep_last": 1},
        metrics={"every_n_steps": 1},
        limits={"stall_timeout_s": TIMEOUT_S, "max_restarts": max_restarts},
    )


def stack_of(stacks: dict[str, Any], rank: int) -> str:
    return next(r["stack"] for r in stacks["ranks"] if r["rank"] == rank)


def stalled_after_step_3(client: httpx.Client, job_id: int) -> tuple[dict[str, Any], float]:
    """The job once it ended, and the seconds from its step counter's reaching 3 to its end."""
    reached: float | None = None
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if reached is None and job["progress"]["step"] >= 3:
            reached = time.monotonic()
        if job["status"] in TERMINAL:
            assert reached is not None, f"it ended before step 3: {job['status']} {job['message']}"
            return job, time.monotonic() - reached
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} never ended")


def test_a_rank_that_never_arrives_stalls_the_job_which_keeps_every_stack(embedded_stack: Stack) -> None:
    code = push(embedded_stack, STALL)
    with embedded_stack.client() as client:
        job_id = submit(client, stalling(code, 0))["id"]
        job, took = stalled_after_step_3(client, job_id)
        assert (job["status"], job["status_reason"]) == ("failed", "stalled"), job
        assert took < TIMEOUT_S + SLACK_S, f"stalled {took:.0f} s after step 3"
        assert "ranks 1 did not arrive: ranks 0 wait in all_reduce" in job["message"], job["message"]
        stacks = client.get(f"/v1/jobs/{job_id}/stacks").json()
    assert stacks["reason"] == "stalled"
    assert [r["rank"] for r in stacks["ranks"]] == [0, 1]
    assert "in all_reduce" in stack_of(stacks, 0)
    assert "in wait_forever" in stack_of(stacks, 1) and "in all_reduce" not in stack_of(stacks, 1)
    assert not job_processes(runs_dir(embedded_stack), job_id)
    shown = trainyard(embedded_stack, "stacks", job_id, columns=80)
    assert shown.returncode == 0, shown.stderr
    assert "rank 1 on " in shown.stdout and "in wait_forever" in shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80


def test_a_stalled_job_restarts_once_from_its_checkpoint(embedded_stack: Stack) -> None:
    code = push(embedded_stack, STALL)
    with embedded_stack.client() as client:
        job_id = submit(client, stalling(code, 1))["id"]
        job = wait_status(client, job_id, {"failed"}, timeout=600)
        assert (job["status_reason"], job["attempt"]) == ("stalled", 2), job
        assert "all 1 restarts used" in job["message"]
        events = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
        log = client.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0}).json()["text"]
    restarts = [e for e in events if e["to_status"] == "restarting"]
    assert [e["reason"] for e in restarts] == ["stalled"]
    assert "starting after step 2" in log, "the restart resumes from step 2's checkpoint"
    assert not job_processes(runs_dir(embedded_stack), job_id)


def captured_now(client: httpx.Client, job_id: int) -> dict[str, Any]:
    missing = client.get(f"/v1/jobs/{job_id}/stacks")
    assert missing.status_code == 404 and "no stacks captured yet" in missing.json()["detail"]
    assert client.post(f"/v1/jobs/{job_id}/stacks").status_code == 202
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = client.get(f"/v1/jobs/{job_id}/stacks")
        if answer.status_code == 200:
            stacks: dict[str, Any] = answer.json()
            return stacks
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}: no capture within 30 s of asking")


@pytest.mark.parametrize("kind", ["built-in", "sandboxed bundle"])
def test_stacks_on_demand_from_a_running_job(embedded_stack: Stack, kind: str) -> None:
    if kind == "built-in":
        spec, frame = LONG, "trainers/loop.py"
    else:
        entrypoint = ["python", "train.py", "--delay", "0.05"]
        spec, frame = (
            program(push(embedded_stack, PACED), 100_000, program={"entrypoint": entrypoint}),
            "train.py",
        )
    with embedded_stack.client() as client:
        job_id = submit(client, spec)["id"]
        wait_step(embedded_stack, job_id, 5, timeout=400)
        stacks = captured_now(client, job_id)
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "running", "a capture stops nothing"
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        wait_status(client, job_id, {"cancelled"})
        refused = client.post(f"/v1/jobs/{job_id}/stacks")
    assert stacks["reason"] == "requested"
    assert [r["rank"] for r in stacks["ranks"]] == [0, 1], stacks
    for rank in (0, 1):
        assert frame in stack_of(stacks, rank), stack_of(stacks, rank)
    assert refused.status_code == 409 and "running job" in refused.json()["detail"]

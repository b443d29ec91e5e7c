"""A user's own code through its whole life, as for built-ins (tests/integration/test_faults_restart.py):
a factory job and a program job, each of 2 gloo ranks under ddp in the sandbox, are cancelled mid-run,
retried, and go on from their final checkpoint along the curve of an uninterrupted run; a third job of
each resumes from another job's checkpoint (checkpoint.resume_from), which its sandbox shows it read-only
and alone of that job's files."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.jobs import PACED, metric_values, submit, wait_status
from tests.integration.servers import Stack
from tests.integration.test_faults_restart import LOSS_RTOL, wait_step
from tests.integration.test_program_e2e import push

STEPS = 60
COMMON: dict[str, Any] = {
    "parallel": {"strategy": "ddp", "nproc_per_node": 2},
    "checkpoint": {"every_n_steps": 20, "every_n_epochs": 0, "keep_last": 5},
    "metrics": {"every_n_steps": 5},
}


def factories(code: str, delay_s: float, max_steps: int = STEPS) -> dict[str, Any]:
    return {
        **COMMON,
        "code": code,
        "model": {"factory": "models:build", "kwargs": {"delay_s": delay_s}},
        "data": {"factory": "data:build"},
        "train": {"loss": "models:loss", "max_steps": max_steps, "batch_size": 32, "lr": 0.05, "seed": 0},
    }


def program(code: str, delay_s: float) -> dict[str, Any]:
    entrypoint = ["python", "train.py", "--delay", str(delay_s)]
    return {**COMMON, "code": code, "program": {"entrypoint": entrypoint}, "train": {"max_steps": STEPS}}


KINDS = {"factories": factories, "program": program}


@pytest.fixture(scope="module")
def paced(embedded_stack: Stack) -> str:
    return push(embedded_stack, PACED)


@pytest.fixture(scope="module")
def references(embedded_stack: Stack, paced: str) -> dict[str, int]:
    """An uninterrupted run of each kind, the two side by side, both finished before the tests' own jobs:
    a cancel's final checkpoint must not wait for cores that they hold (TRAINYARD_CANCEL_GRACE_S is short
    in the tests' stacks)."""
    with embedded_stack.client() as client:
        ids = {kind: int(submit(client, spec(paced, 0.0))["id"]) for kind, spec in KINDS.items()}
    for job_id in ids.values():
        finished(embedded_stack, job_id)
    return ids


def finished(stack: Stack, job_id: int) -> list[tuple[int, float]]:
    with stack.client() as client:
        job = wait_status(client, job_id, {"succeeded"}, timeout=300)
        assert job["attempt"] == 1, job
        return metric_values(client, job_id, "loss")


def assert_follows(curve: list[tuple[int, float]], reference: list[tuple[int, float]]) -> None:
    """`curve` is the reference's over the steps it spans: none twice, none missed, the same losses."""
    expected = dict(reference)
    spanned = [step for step in expected if curve[0][0] <= step <= curve[-1][0]]
    assert [step for step, _ in curve] == spanned, curve
    for step, value in curve:
        assert value == pytest.approx(expected[step], rel=LOSS_RTOL), step


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancelled_job_retried_goes_on_from_its_final_checkpoint(
    embedded_stack: Stack, paced: str, references: dict[str, int], kind: str
) -> None:
    with embedded_stack.client() as client:
        job_id = submit(client, KINDS[kind](paced, 0.15))["id"]
        wait_step(embedded_stack, job_id, 15, timeout=180)
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        wait_status(client, job_id, {"cancelled"})
        final = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"][-1]
        assert 15 <= final["step"] < STEPS, final
        retried = client.post(f"/v1/jobs/{job_id}/retry")
        assert retried.status_code == 201, retried.text
        child = retried.json()["job"]
        assert child["spec"]["checkpoint"]["resume_from"] == final["id"]
        assert child["spec"] == {**KINDS[kind](paced, 0.15), "checkpoint": child["spec"]["checkpoint"]}
        parent_curve = metric_values(client, job_id, "loss")
    reference = finished(embedded_stack, references[kind])
    curve = finished(embedded_stack, child["id"])
    assert curve[0][0] > final["step"], "the retry started over"
    assert curve[-1][0] == STEPS
    assert_follows(curve, reference)
    assert parent_curve[-1][0] == final["step"]
    assert_follows(parent_curve, reference)


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_resumes_from_another_job_s_checkpoint(
    embedded_stack: Stack, paced: str, references: dict[str, int], kind: str
) -> None:
    reference = finished(embedded_stack, references[kind])
    with embedded_stack.client() as client:
        saved = client.get(f"/v1/jobs/{references[kind]}/checkpoints").json()["data"]
        start = next(checkpoint for checkpoint in saved if checkpoint["step"] == 20)
        spec = KINDS[kind](paced, 0.0)
        spec["checkpoint"] = {**spec["checkpoint"], "resume_from": start["id"]}
        job_id = submit(client, spec)["id"]
    curve = finished(embedded_stack, job_id)
    assert curve[0][0] == 25, curve
    assert_follows(curve, reference)

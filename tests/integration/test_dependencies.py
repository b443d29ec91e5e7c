"""Job dependencies through the real service (embedded stack): a chain pretrain -> fine-tune -> evaluate, each
waiting queued for the one before and resuming from its last checkpoint (checkpoint.resume_from_job); and a
failed link cancels the jobs that wait for it, and theirs, with dependency_failed."""

from __future__ import annotations

import itertools
from typing import Any

from tests.integration.jobs import example_spec, metric_values, submit, wait_status
from tests.integration.servers import Stack

SINGLE = {"strategy": "single", "nproc_per_node": 1}
PRETRAIN = example_spec("digits_ddp_cpu.json", train={"epochs": 1}, parallel=SINGLE)
# lr 1e4 makes the loss overflow within a few steps: the job fails (nonfinite_loss).
DIVERGING = example_spec("digits_ddp_cpu.json", train={"lr": 1e4}, parallel=SINGLE)


def after(job_id: int, epochs: int) -> dict[str, Any]:
    """PRETRAIN for `epochs` in all, waiting for `job_id` and continuing from its last checkpoint."""
    return {
        **PRETRAIN,
        "train": {**PRETRAIN["train"], "epochs": epochs},
        "depends_on": [job_id],
        "checkpoint": {**PRETRAIN["checkpoint"], "resume_from_job": job_id},
    }


def test_a_chain_of_three_runs_in_order_each_resuming_from_the_one_before(embedded_stack: Stack) -> None:
    with embedded_stack.client() as client:
        pretrain = submit(client, PRETRAIN)
        finetune = submit(client, after(pretrain["id"], 2))
        evaluate = submit(client, after(finetune["id"], 3))
        for waiting, on in ((finetune, pretrain), (evaluate, finetune)):
            assert (waiting["status"], waiting["status_reason"]) == ("queued", "waiting_for_jobs"), waiting
            assert waiting["message"] == f"waiting for job {on['id']} to succeed (depends_on)"
            assert waiting["parent_id"] == on["id"]
        ended = [wait_status(client, job["id"], {"succeeded"}) for job in (pretrain, finetune, evaluate)]
        for before, job in itertools.pairwise(ended):
            assert job["started_at"] >= before["finished_at"], (before, job)
            first_step = metric_values(client, job["id"], "loss")[0][0]
            # It went on from the step where the one before stopped, not from the start.
            assert before["progress"]["total"] < first_step <= before["progress"]["total"] + 5, first_step
        assert [job["progress"]["total"] for job in ended] == [
            ended[0]["progress"]["total"] * n for n in (1, 2, 3)
        ]


def test_a_failed_link_cancels_its_dependants_with_dependency_failed(embedded_stack: Stack) -> None:
    with embedded_stack.client() as client:
        failing = submit(client, DIVERGING)
        finetune = submit(client, after(failing["id"], 2))
        evaluate = submit(client, after(finetune["id"], 3))
        assert wait_status(client, failing["id"], {"failed"})["status_reason"] == "nonfinite_loss"
        for job, on, ended in ((finetune, failing, "failed"), (evaluate, finetune, "cancelled")):
            cancelled = wait_status(client, job["id"], {"cancelled"}, timeout=30)
            assert cancelled["status_reason"] == "dependency_failed", cancelled
            assert cancelled["message"].startswith(f"job {on['id']}, which it depends on, ended {ended}")
            assert cancelled["started_at"] is None, "it never ran"

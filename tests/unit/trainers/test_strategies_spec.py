"""Bad parallel layouts are refused through the API with 422 naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.conftest import assert_problem, job_body

TRAIN = {"max_steps": 5, "batch_size": 64}

BAD_LAYOUTS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "placement of a module the model lacks",
        job_body(parallel={"gpus": [0], "placement": {"embedding": "cpu"}}),
        "parallel.placement",
        "'embedding', which mlp does not have; use 0, 1, 2, 3, 4, 5",
    ),
    (
        "placement on a job without a GPU",
        job_body(parallel={"placement": {"0": "cpu"}}),
        "parallel.placement",
        "this job has no GPU, so it would change nothing",
    ),
    (
        "split at a module the model lacks",
        job_body(model={"arch": "resnet18"}, parallel={"strategy": "model_parallel", "split_at": ["layer9"]}),
        "parallel.split_at",
        "'layer9', which the model does not have; use some of bn1",
    ),
    (
        "split at the first module",
        job_body(parallel={"strategy": "pipeline", "nproc_per_node": 2, "split_at": ["0"]}),
        "parallel.split_at",
        "first stage would be empty",
    ),
    (
        "split points out of order",
        job_body(parallel={"strategy": "model_parallel", "gpus": [0, 1, 2], "split_at": ["4", "2"]}),
        "parallel.split_at",
        "in the model's order",
    ),
    (
        "more stages than the model splits into",
        job_body(
            model={"arch": "alexnet"}, train=TRAIN, parallel={"strategy": "pipeline", "nproc_per_node": 4}
        ),
        "parallel.strategy",
        "at most 3 by default; ask for fewer GPUs/processes or give parallel.split_at",
    ),
    (
        "split points for more GPUs than given",
        job_body(parallel={"strategy": "model_parallel", "gpus": [0, 1], "split_at": ["2", "4"]}),
        "parallel.split_at",
        "give 1 split points or change the GPU count",
    ),
    (
        "model_parallel on one GPU",
        job_body(parallel={"strategy": "model_parallel", "gpus": [0]}),
        "parallel.strategy",
        "needs at least 2 GPUs",
    ),
    ("dp without GPUs", job_body(parallel={"strategy": "dp"}), "parallel.strategy", "ask for parallel.gpus"),
    (
        "more micro-batches than samples per stage",
        job_body(
            train={"max_steps": 5, "batch_size": 8}, parallel={"strategy": "pipeline", "microbatches": 16}
        ),
        "parallel.microbatches",
        "use at most 8",
    ),
    (
        "pipeline of the sparse embedding model",
        job_body(
            model={"arch": "embedding_bag"},
            data={"dataset": "synthetic_bags"},
            parallel={"strategy": "pipeline", "nproc_per_node": 2},
        ),
        "parallel.strategy",
        "use strategy single with parallel.placement",
    ),
]


@pytest.mark.parametrize(
    ("body", "field", "fragment"), [case[1:] for case in BAD_LAYOUTS], ids=[case[0] for case in BAD_LAYOUTS]
)
def test_bad_layout_is_refused_naming_the_field(
    client: TestClient, body: dict[str, Any], field: str, fragment: str
) -> None:
    assert_problem(client.post("/v1/jobs", json=body, params={"dry_run": True}), field, fragment)


@pytest.mark.parametrize(
    "parallel",
    [
        {"strategy": "model_parallel", "gpus": [0, 1], "split_at": ["3"]},
        {"strategy": "pipeline", "nproc_per_node": 2, "microbatches": 4},
        {"gpus": [0], "placement": {"0": "cpu"}},
        {"strategy": "dp", "gpus": [0, 1]},
    ],
)
def test_good_layouts_dry_run(client: TestClient, parallel: dict[str, Any]) -> None:
    response = client.post(
        "/v1/jobs", json=job_body(train=TRAIN, parallel=parallel), params={"dry_run": True}
    )
    assert response.status_code == 200, response.text

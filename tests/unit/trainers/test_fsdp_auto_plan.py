"""strategy auto, through the API's dry run: single for one device or a placement, ddp for a model that
replicates, fsdp for one too large to replicate (a big embedding table)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.conftest import job_body

HUGE_BAGS = {"dataset": "synthetic_bags", "vocab_size": 20_000_000, "num_samples": 64}


@pytest.mark.parametrize(
    ("sections", "strategy", "world_size"),
    [
        ({"parallel": {"gpus": [0]}}, "single", 1),
        ({"model": {"arch": "resnet50"}, "parallel": {"gpus": [0, 1]}}, "ddp", 2),
        (
            {
                "model": {"arch": "embedding_bag", "kwargs": {"embedding_dim": 150}},
                "data": HUGE_BAGS,
                "parallel": {"num_gpus": 2},
            },
            "fsdp",
            2,
        ),
        (
            {
                "model": {"arch": "embedding_bag", "kwargs": {"embedding_dim": 150}},
                "data": HUGE_BAGS,
                "parallel": {"gpus": [0], "placement": {"embedding": "cpu"}},
            },
            "single",
            1,
        ),
        ({"parallel": {"nproc_per_node": 2}}, "ddp", 2),
    ],
)
def test_auto_picks_by_devices_size_and_placement(
    client: TestClient, sections: dict[str, Any], strategy: str, world_size: int
) -> None:
    response = client.post("/v1/jobs", params={"dry_run": "true"}, json=job_body(**sections))
    assert response.status_code == 200, response.text
    plan = response.json()["plan"]
    assert (plan["strategy"], plan["world_size"]) == (strategy, world_size), plan["strategy_reason"]

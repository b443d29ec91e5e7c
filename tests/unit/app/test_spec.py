"""Bad job specs are refused with 422 naming the field, and a refused request stores and enqueues nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.config import Settings
from core.models import Worker
from tests.unit.conftest import assert_nothing_stored, assert_problem, job_body

BAD_SPECS: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown model", job_body(model={"arch": "gpt5"}), "model.arch", "choose one of mlp"),
    ("unknown dataset", job_body(data={"dataset": "imagenet"}), "data.dataset", "choose one of synthetic"),
    ("unknown strategy", job_body(parallel={"strategy": "zero3"}), "parallel.strategy", "'ddp'"),
    ("zero lr", job_body(train={"lr": 0}), "train.lr", "greater than 0"),
    ("negative lr", job_body(train={"lr": -0.1}), "train.lr", "greater than 0"),
    ("NaN lr as a string", job_body(train={"lr": "NaN"}), "train.lr", "finite number"),
    (
        "batch not divisible by the world size",
        job_body(train={"batch_size": 10}, parallel={"nproc_per_node": 4}),
        "train.batch_size",
        "use a multiple of 4",
    ),
    (
        "several processes with strategy single",
        job_body(parallel={"strategy": "single", "nproc_per_node": 2}),
        "parallel.strategy",
        "use strategy ddp",
    ),
    ("fp16 on CPU", job_body(precision="fp16"), "precision", "needs a GPU; on CPU use fp32 (or bf16)"),
    (
        "SyncBatchNorm on CPU",
        job_body(parallel={"strategy": "ddp", "nproc_per_node": 2, "sync_batchnorm": True}),
        "parallel.sync_batchnorm",
        "GPUs only",
    ),
    ("unknown top-level field", job_body(colour="blue"), "colour", "remove it"),
    ("unknown nested field", job_body(train={"learning_rate": 0.1}), "train.learning_rate", "lr"),
    (
        "disallowed model kwarg",
        job_body(model={"arch": "mlp", "kwargs": {"x": 1}}),
        "model.kwargs.x",
        "hidden",
    ),
    ("GPU listed twice", job_body(parallel={"gpus": [0, 0]}), "parallel.gpus", "twice"),
    ("missing model", {"data": {"dataset": "synthetic"}}, "model", "required"),
    (
        "resume from a checkpoint that does not exist",
        job_body(checkpoint={"resume_from": 99}),
        "checkpoint.resume_from",
        "GET /v1/jobs/{id}/checkpoints",
    ),
]


@pytest.mark.parametrize(
    ("body", "field", "fragment"), [case[1:] for case in BAD_SPECS], ids=[case[0] for case in BAD_SPECS]
)
def test_bad_spec_is_refused_naming_the_field(
    client: TestClient, session: Session, settings: Settings, body: dict[str, Any], field: str, fragment: str
) -> None:
    for dry_run in (False, True):
        response = client.post("/v1/jobs", json=body, params={"dry_run": dry_run})
        assert_problem(response, field, fragment)
    assert_nothing_stored(session, settings)


def test_nan_lr_literal_is_refused(client: TestClient, session: Session, settings: Settings) -> None:
    raw = '{"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}, "train": {"lr": NaN}}'
    response = client.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
    assert_problem(response, "train.lr", "finite number")
    assert_nothing_stored(session, settings)


def test_invalid_json_is_refused(client: TestClient, session: Session, settings: Settings) -> None:
    response = client.post("/v1/jobs", content="{not json", headers={"content-type": "application/json"})
    assert_problem(response, "body", "invalid JSON")
    assert_nothing_stored(session, settings)


def register(session: Session, host: str, gpus: list[int], worker_id: str | None = None) -> None:
    gpu_rows = [{"index": i, "name": "NVIDIA H100", "memory_total_mb": 81559} for i in gpus]
    session.add(Worker(id=worker_id or f"{host}:1", host=host, gpus=gpu_rows))
    session.commit()


def test_gpu_the_host_lacks_is_refused(client: TestClient, session: Session, settings: Settings) -> None:
    register(session, "box", [0, 1])
    response = client.post("/v1/jobs", json=job_body(parallel={"gpus": [0, 3]}, train={"batch_size": 8}))
    assert_problem(
        response, "parallel.gpus", "parallel.gpus: GPU 3 does not exist on this host (it has GPUs 0, 1)"
    )
    response = client.post("/v1/jobs", json=job_body(parallel={"num_gpus": 4}))
    assert_problem(response, "parallel.num_gpus", "the largest host has 2; ask for at most 2")
    assert_nothing_stored(session, settings)


def test_gpu_on_a_cpu_only_cluster_is_refused(
    client: TestClient, session: Session, settings: Settings
) -> None:
    register(session, "laptop", [])
    response = client.post("/v1/jobs", json=job_body(parallel={"gpus": [0]}))
    assert_problem(response, "parallel.gpus", "GPU 0 does not exist on this host (it has no GPUs)")
    assert_nothing_stored(session, settings)


def test_a_dry_run_of_a_gpu_spec_on_a_cpu_only_cluster_plans_it_as_not_runnable(
    client: TestClient, session: Session, settings: Settings
) -> None:
    register(session, "laptop", [])
    body = job_body(parallel={"strategy": "ddp", "gpus": [0, 1]}, train={"batch_size": 8})
    response = client.post("/v1/jobs", json=body, params={"dry_run": True})
    assert response.status_code == 200, response.text
    plan = response.json()["plan"]
    assert plan["strategy"] == "ddp" and plan["device"] == "cuda" and plan["world_size"] == 2
    assert plan["runnable"] is False
    assert plan["not_runnable_because"] == [
        "parallel.gpus: GPU 0 does not exist on this host (it has no GPUs) "
        "(leave parallel.gpus out to train on CPU)"
    ]
    # A spec with a fault of its own is still refused, and a submission of an unplaceable one too.
    bad = job_body(parallel={"gpus": [0]}, train={"batch_size": 8, "lr": -1})
    assert client.post("/v1/jobs", json=bad, params={"dry_run": True}).status_code == 422
    assert_problem(client.post("/v1/jobs", json=body), "parallel.gpus", "GPU 0 does not exist")
    assert client.post("/v1/jobs", json=job_body(), params={"dry_run": True}).json()["plan"]["runnable"]
    assert_nothing_stored(session, settings)


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize(
    ("example", "absent", "once_there"),
    [
        # Its images are counted when the job starts; the files of a language model's folders at submit.
        ("image_folder_stream.json", ["data.root"], 200),
        ("hf_lora_local.json", ["data.root", "data.tokenizer", "model.path"], 422),
    ],
)
def test_a_dry_run_of_a_spec_whose_folders_are_not_there_yet_plans_it_as_not_runnable(
    data_dir: Path,
    client: TestClient,
    session: Session,
    settings: Settings,
    example: str,
    absent: list[str],
    once_there: int,
) -> None:
    body = json.loads((EXAMPLES / example).read_text())
    response = client.post("/v1/jobs", json=body, params={"dry_run": True})
    assert response.status_code == 200, response.text
    plan = response.json()["plan"]
    assert plan["runnable"] is False and plan["argv"]
    assert [reason.partition(": ")[0] for reason in plan["not_runnable_because"]] == absent
    assert "is not a directory under TRAINYARD_DATA_DIR" in plan["not_runnable_because"][0]
    # A submission still refuses it; and once the folders are there, a dry run judges them as it does.
    assert_problem(client.post("/v1/jobs", json=body), "data.root", "is not a directory")
    for folder in {body["data"]["root"], body["model"].get("path", body["data"]["root"])}:
        (data_dir / folder).mkdir(parents=True)
    again = client.post("/v1/jobs", json=body, params={"dry_run": True})
    assert again.status_code == once_there, again.text
    assert once_there != 200 or again.json()["plan"]["runnable"]
    assert_nothing_stored(session, settings)


def test_gpus_must_all_be_on_one_host(client: TestClient, session: Session, settings: Settings) -> None:
    register(session, "a", [0])
    register(session, "b", [1])
    response = client.post("/v1/jobs", json=job_body(parallel={"gpus": [0, 1]}))
    assert_problem(response, "parallel.gpus", "no single host has GPUs 0, 1 (a has GPUs 0; b has GPUs 1)")
    assert client.post("/v1/jobs", json=job_body(parallel={"gpus": [1]})).status_code == 201


def test_gpus_are_accepted_before_any_worker_registers(client: TestClient, settings: Settings) -> None:
    response = client.post("/v1/jobs", json=job_body(parallel={"gpus": [3, 5]}))
    assert response.status_code == 201, response.text
    assert response.json()["plan"]["gpus"] == [3, 5]
    assert response.json()["plan"]["world_size"] == 2

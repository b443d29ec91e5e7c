"""artifact_store=s3 through the real stack, with an API that cannot see the worker's runs directory (each
has its own TRAINYARD_RUNS_DIR, as on two hosts) and moto's S3 server on loopback as the bucket."""

from __future__ import annotations

import io
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import torch
from moto.server import ThreadedMotoServer

from tests.integration.jobs import example_spec, metric_values, submit, wait_status
from tests.integration.servers import Stack, free_port

pytestmark = pytest.mark.own_services

BUCKET = "trainyard-artifacts"
PREFIX = "runs"
# keep_last=1: the first epoch's checkpoint is pruned, so its object must go too.
QUICK = example_spec("digits_ddp_cpu.json", train={"epochs": 2}, checkpoint={"keep_last": 1})


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "TRAINYARD_ARTIFACT_STORE": "s3",
        "TRAINYARD_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "TRAINYARD_S3_BUCKET": BUCKET,
        "TRAINYARD_S3_PREFIX": PREFIX,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    bucket_client(env).create_bucket(Bucket=BUCKET)
    yield env
    server.stop()


def bucket_client(env: dict[str, str]) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=env["TRAINYARD_S3_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )


@pytest.fixture(scope="module")
def split_stack(
    tmp_path_factory: pytest.TempPathFactory,
    s3_env: dict[str, str],
    stopping: list[subprocess.Popen[bytes]],
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("stack-s3")
    running = Stack.embedded(workdir, api_env={"TRAINYARD_RUNS_DIR": str(workdir / "api-runs")}, **s3_env)
    yield running
    stopping += running.terminate()


def stored_keys(env: dict[str, str], job_id: int) -> list[str]:
    listed = bucket_client(env).list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/{job_id}/")
    return sorted(item["Key"].removeprefix(f"{PREFIX}/{job_id}/") for item in listed.get("Contents", []))


def whole_log(client: httpx.Client, job_id: int, rank: int | None) -> str:
    text, offset = "", 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        params = {"offset": offset} if rank is None else {"offset": offset, "rank": rank}
        chunk = client.get(f"/v1/jobs/{job_id}/logs", params=params).json()
        text, offset = text + chunk["text"], chunk["next_offset"]
        if chunk["eof"]:
            return text
    raise AssertionError(f"job {job_id}'s log of rank {rank} never reached eof")


def test_checkpoints_and_logs_reach_an_api_on_another_disk(
    split_stack: Stack, s3_env: dict[str, str]
) -> None:
    worker_runs = Path(split_stack.env["TRAINYARD_RUNS_DIR"])
    api_runs = Path(split_stack.api_env["TRAINYARD_RUNS_DIR"])
    with split_stack.client() as client:
        first = wait_status(client, submit(client, QUICK)["id"], {"succeeded"})
        assert metric_values(client, first["id"], "loss")
        assert not (api_runs / str(first["id"])).exists(), "the API must not have read the worker's disk"

        (checkpoint,) = client.get(f"/v1/jobs/{first['id']}/checkpoints").json()["data"]
        state = torch.load(io.BytesIO(client.get(checkpoint["download_url"]).content), weights_only=True)
        assert state["step"] == checkpoint["step"] and state["model"]
        assert [key for key in stored_keys(s3_env, first["id"]) if key.startswith("checkpoints/")] == [
            f"checkpoints/step-{checkpoint['step']:08d}.pt"
        ]
        assert "=== attempt 1" in whole_log(client, first["id"], None)
        assert "step" in whole_log(client, first["id"], 0)
        for rank in (None, 0, 1):  # read back across the parts, byte for byte
            name = "launcher.log" if rank is None else f"rank{rank}.log"
            on_worker = (worker_runs / str(first["id"]) / "logs" / name).read_text()
            assert whole_log(client, first["id"], rank) == on_worker, name

        # Another host resumes from it: nothing of the first run is on this disk any more.
        shutil.rmtree(worker_runs / str(first["id"]))
        spec = {
            **QUICK,
            "train": {**QUICK["train"], "epochs": 3},
            "checkpoint": {"resume_from": checkpoint["id"]},
        }
        resumed = wait_status(client, submit(client, spec)["id"], {"succeeded"})
        steps = [step for step, _ in metric_values(client, resumed["id"], "loss")]
        assert steps[0] > checkpoint["step"], (checkpoint["step"], steps)
        assert resumed["plan"]["resume_path"].startswith(str(worker_runs / str(resumed["id"]) / "resume"))

        assert client.delete(f"/v1/jobs/{first['id']}").status_code == 204
        assert stored_keys(s3_env, first["id"]) == []

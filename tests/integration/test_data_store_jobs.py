"""Jobs whose data.root is in an object store, through the whole service (embedded stack, real worker, moto's
S3 server on loopback behind a proxy): shards, an image folder and token files, each read with a
data.credentials secret, are cancelled mid-epoch, retried, and go on from their final checkpoint along the
loss curve of the same job on the same files on disk, step for step and bit for bit (one CPU process with the
rank's threads: the same samples in the same order give the same floats). That curve is the rank's training
loop run in this process: a service job for it would start torchrun and a rank, each importing torch, and
prove no more. The proxy paces each read, so that a cancel lands mid-run on any box, and answers a storm of
503s mid-run, which the jobs ride out."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from core.config import Settings
from jobspec.datadir import DATA_DIR_ENV
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from tests.integration.jobs import metric_values, submit, wait_status
from tests.integration.servers import Stack
from tests.integration.test_faults_restart import wait_step
from tests.object_store import Store, Storm, credentials, moto_store, storm_proxy
from tests.unit.trainers.image_sets import Pictures, write_folder, write_shards
from tests.unit.trainers.test_token_steps import losses
from tests.unit.trainers.token_corpus import write_ids
from trainers.dist_env import DistEnv
from trainers.loop import train
from worker.executors.local.runner import cpu_share

pytestmark = pytest.mark.own_services

PICTURES = Pictures(count=144, classes=3, width=(18, 24), height=(16, 22))
STEPS_PER_EPOCH = 16  # 128 training samples (or windows) in steps of 8
EPOCHS = 2
STORM = 4  # 503s in a row, mid-run: more than botocore's default attempts
IMAGES: dict[str, Any] = {
    "model": {"arch": "small_cnn", "kwargs": {"channels": 4}},
    "data": {
        "image_size": 16,
        "load_size": 16,
        "placement": "stream",
        "val_fraction": 0.1,
        "loader_workers": 0,
    },
}
KINDS: dict[str, dict[str, Any]] = {
    # shards' reads in a loader worker (the reader pickled into another process), the others' in the rank
    "shards": {**IMAGES, "data": {**IMAGES["data"], "dataset": "shards", "loader_workers": 1}},
    "image_folder": {**IMAGES, "data": {**IMAGES["data"], "dataset": "image_folder"}},
    "tokens": {
        "model": {"arch": "gpt", "kwargs": {"n_layer": 1, "n_head": 2, "n_embd": 16}},
        "data": {
            "dataset": "tokens",
            "block_size": 16,
            "vocab_size": 64,
            "val_fraction": 0.0,
            "loader_workers": 0,
        },
    },
}


def spec(kind: str, root: str, **data: Any) -> dict[str, Any]:
    base = KINDS[kind]
    return {
        "name": f"stored-{kind}",
        "model": base["model"],
        "data": {**base["data"], "root": root, **data},
        "train": {"epochs": EPOCHS, "batch_size": 8, "lr": 0.05, "seed": 0},
        "parallel": {"strategy": "single", "nproc_per_node": 1},
        "checkpoint": {"every_n_steps": 0, "every_n_epochs": 0, "keep_last": 2},
        "metrics": {"every_n_steps": 1},
    }


def write_data(root: Path) -> None:
    write_shards(root / "shards", PICTURES, per_shard=48)
    write_folder(root / "image_folder", PICTURES)
    # 128 windows of 16 tokens and the one token after the last
    write_ids(root / "tokens" / "train.bin", [(i * 7) % 64 for i in range(STEPS_PER_EPOCH * 8 * 16 + 1)])
    assert all(tarfile.is_tarfile(path) for path in (root / "shards").glob("*.tar"))


@pytest.fixture(scope="module")
def store() -> Iterator[tuple[Store, str, Storm]]:
    with moto_store() as running, storm_proxy(running.endpoint) as (proxy, storm):
        yield running, proxy, storm


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, store: tuple[Store, str, Storm], stopping: list[Any]
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("stack-data-store")
    write_data(workdir / "data")
    for kind in KINDS:
        store[0].upload(workdir / "data" / kind, kind)
    running = Stack.embedded(workdir)
    with running.client() as client:
        made = client.post("/v1/secrets", json={"name": "s3-key", "value": credentials(store[1])})
        assert made.status_code == 201, made.text
    yield running
    stopping += running.terminate()


def local_curve(kind: str, data: Path, settings: Settings) -> list[tuple[int, float]]:
    """The loss curve of `kind` on the files under `data`, uninterrupted, from the loop a rank runs, with
    the threads a rank of the stack of `settings` gets (OMP_NUM_THREADS): a sum split over other threads may
    differ in its last bits."""
    job = JobSpec.model_validate(spec(kind, kind))
    run_dir = data.parent / "references" / kind
    run_dir.mkdir(parents=True)
    config = RunConfig(job_id=0, attempt=1, spec=job, plan=resolve_plan(job))
    before = torch.get_num_threads()
    torch.set_num_threads(cpu_share(settings, config.plan) or 1)
    try:
        # A world of one, built directly: rank_env() would also take over this process's SIGTERM.
        assert train(config, run_dir, DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cpu")))
    finally:
        torch.set_num_threads(before)
    return losses(run_dir)


@pytest.fixture(scope="module")
def references(stack: Stack) -> dict[str, list[tuple[int, float]]]:
    """Each kind on the stack's disk."""
    data = Path(stack.env["TRAINYARD_DATA_DIR"])
    settings = Settings(cpu_overcommit=stack.env["TRAINYARD_CPU_OVERCOMMIT"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DATA_DIR_ENV, str(data))
        return {kind: local_curve(kind, data, settings) for kind in KINDS}


@pytest.mark.timeout(900)  # a job's start imports torch: minutes on a loaded box of two cores
@pytest.mark.parametrize("kind", KINDS)
def test_a_stored_dataset_cancelled_mid_epoch_and_retried_follows_the_local_curve_exactly(
    stack: Stack,
    store: tuple[Store, str, Storm],
    references: dict[str, list[tuple[int, float]]],
    kind: str,
) -> None:
    _, _, storm = store
    storm.delay_s = 0.02  # a step of 8 reads takes 0.16 s at least: a cancel lands mid-run
    stored = spec(kind, f"s3://datasets/{kind}", credentials={"secret": "s3-key"}, cache_bytes=0)
    try:
        with stack.client() as client:
            dry = client.post("/v1/jobs?dry_run=true", json=stored)
            assert dry.status_code == 200, dry.text
            assert dry.json()["plan"]["data_found"]["objects"] >= 1
            job_id = submit(client, stored)["id"]
            wait_step(stack, job_id, 2, timeout=300)
            answered = storm.answered_503
            storm.left = STORM
            wait_step(stack, job_id, 5, timeout=120)
            assert storm.answered_503 == answered + STORM, "the storm never came"
            assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
            wait_status(client, job_id, {"cancelled"})
            final = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"][-1]
            assert final["step"] % STEPS_PER_EPOCH, (
                f"the final checkpoint {final['step']} is no mid-epoch one"
            )
            storm.delay_s = 0.0
            retried = client.post(f"/v1/jobs/{job_id}/retry")
            assert retried.status_code == 201, retried.text
            child = retried.json()["job"]["id"]
            job = wait_status(client, child, {"succeeded", "failed"}, timeout=300)
            assert job["status"] == "succeeded", job
            first, second = metric_values(client, job_id, "loss"), metric_values(client, child, "loss")
    finally:
        storm.delay_s = 0.0
    reference = dict(references[kind])
    assert [step for step, _ in second] == list(range(final["step"] + 1, EPOCHS * STEPS_PER_EPOCH + 1))
    assert second == [(step, reference[step]) for step, _ in second], "the retry left the local curve"
    assert first == [(step, reference[step]) for step, _ in first], "the first attempt left the local curve"
    assert storm.left == 0

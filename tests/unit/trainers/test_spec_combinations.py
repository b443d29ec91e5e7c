"""Options valid alone but not together are refused at submit (422 naming the field and the fix) instead of
failing or being ignored once the job runs; the catalogue they are checked against matches the real models
and datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from jobspec.catalog.archs import ARCHS, Arch
from jobspec.catalog.datasets import DATASETS, DatasetName, InputKind
from jobspec.plan import resolve_plan
from jobspec.spec import DataSpec, JobSpec
from tests.unit.conftest import assert_problem, job_body
from tests.unit.disk_data import write_cifar_batch, write_idx
from trainers.data import SOURCES, load_dataset
from trainers.models import build_model
from trainers.schedule import sparse_parameters

BAG_MODEL = {"arch": "embedding_bag"}
BAG_DATA = {"dataset": "synthetic_bags", "num_samples": 64}
HOGWILD = {"strategy": "hogwild"}
PLATEAU = {"max_steps": 5, "batch_size": 8, "schedule": "plateau"}


def bags(**sections: Any) -> dict[str, Any]:
    """A small embedding_bag spec; keyword arguments replace whole sections."""
    return job_body(**{"model": BAG_MODEL, "data": BAG_DATA, **sections})


REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "embedding_bag on images",
        job_body(model={"arch": "embedding_bag"}),
        "model.arch",
        "takes bags of token ids, but data.dataset synthetic holds images; use data.dataset synthetic_bags",
    ),
    (
        "an image model on token bags",
        job_body(data=BAG_DATA),
        "data.dataset",
        "which mlp cannot read; use model.arch embedding_bag",
    ),
    (
        "an image size for token bags",
        bags(data={**BAG_DATA, "image_size": 32}),
        "data.image_size",
        "embedding_bag reads bags of token ids; drop it",
    ),
    (
        "adam on the sparse table",
        bags(train={"max_steps": 5, "batch_size": 8, "optimizer": "adam"}),
        "train.optimizer",
        "use train.optimizer sgd, or parallel.strategy fsdp",
    ),
    (
        "adamw on the sparse table in hogwild workers",
        bags(train={"max_steps": 5, "batch_size": 8, "optimizer": "adamw"}, parallel=HOGWILD),
        "train.optimizer",
        "cannot take the sparse gradients of embedding_bag's embedding table",
    ),
    (
        "plateau with evaluation off",
        job_body(train={**PLATEAU, "eval_every_epochs": 0}),
        "train.eval_every_epochs",
        "set train.eval_every_epochs to 1 or more",
    ),
    (
        "plateau with nothing held out",
        job_body(data={"dataset": "digits", "val_fraction": 0}, train=PLATEAU),
        "data.val_fraction",
        "holds nothing of digits out to evaluate on",
    ),
    (
        "plateau under hogwild",
        job_body(train=PLATEAU, parallel=HOGWILD),
        "train.schedule",
        "workers set their lr from the step alone",
    ),
    (
        "tensorboard under hogwild",
        job_body(metrics={"tensorboard": True}, parallel=HOGWILD),
        "metrics.tensorboard",
        "is not supported by parallel.strategy=hogwild",
    ),
    (
        "profiling under hogwild",
        job_body(profile={"steps": 3}, parallel=HOGWILD),
        "profile.steps",
        "set it to 0, or use strategy ddp",
    ),
    (
        "compile under hogwild",
        job_body(performance={"compile": True}, parallel=HOGWILD),
        "performance.compile",
        "the workers train the model uncompiled",
    ),
    (
        "data on a GPU the job does not have",
        job_body(data={"dataset": "synthetic", "num_samples": 64, "placement": "gpu"}),
        "data.placement",
        "ask for parallel.gpus",
    ),
]


@pytest.mark.parametrize(
    ("body", "field", "fragment"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
def test_combination_is_refused_naming_the_field(
    client: TestClient, body: dict[str, Any], field: str, fragment: str
) -> None:
    assert_problem(client.post("/v1/jobs", json=body, params={"dry_run": True}), field, fragment)


@pytest.mark.parametrize(
    "body",
    [
        bags(train={"max_steps": 5, "batch_size": 8, "optimizer": "adam"}, parallel={"strategy": "fsdp"}),
        bags(parallel=HOGWILD),
        job_body(train=PLATEAU),
        job_body(
            data={"dataset": "synthetic", "num_samples": 64, "placement": "gpu"}, parallel={"gpus": [0]}
        ),
    ],
    ids=["adam under fsdp (dense table)", "sgd under hogwild", "plateau evaluating", "data on the job's GPU"],
)
def test_combinations_that_work_are_accepted(client: TestClient, body: dict[str, Any]) -> None:
    response = client.post("/v1/jobs", json=body, params={"dry_run": True})
    assert response.status_code == 200, response.text


TEST_SPLITS = [name for name, info in DATASETS.items() if info.test_split]


@pytest.mark.parametrize("dataset", TEST_SPLITS)
def test_plateau_without_a_held_out_share_is_fine_where_a_test_split_exists(dataset: str) -> None:
    data = {"dataset": dataset, "root": dataset, "val_fraction": 0}
    spec = JobSpec.model_validate({"model": {"arch": "mlp"}, "data": data, "train": PLATEAU})
    resolve_plan(spec)


def test_sparse_archs_are_the_models_with_sparse_gradients() -> None:
    sparse = set()
    built = {name: arch for name, arch in ARCHS.items() if name is not Arch.HF_CAUSAL_LM}  # from model.path
    for name, arch in built.items():
        with torch.device("meta"):  # no weights initialised: only the module types matter
            model = build_model(name, {}, 3, 4, max(arch.min_image_size, 8), vocab_size=100)
        if sparse_parameters(model):
            sparse.add(name)
    assert sparse == {name for name, arch in ARCHS.items() if arch.sparse}


# Generated whole in memory: synthetic_tokens is generated too, but into the run directory, read in windows.
@pytest.mark.parametrize("dataset", [name for name in SOURCES if not DATASETS[name].on_disk])
def test_in_memory_datasets_hold_out_val_fraction_and_hold_what_is_catalogued(dataset: DatasetName) -> None:
    data = load_dataset(DataSpec(dataset=dataset, num_samples=64, val_fraction=0), seed=0)
    info = DATASETS[dataset]
    assert len(data.val[1]) == 0 and not info.test_split
    assert data.tokens == (info.input is InputKind.TOKEN_BAGS)
    assert data.num_classes == (info.classes if isinstance(info.classes, int) else 10)  # the spec's default


def test_cifar10_and_mnist_evaluate_on_their_test_split_whatever_val_fraction(data_dir: Path) -> None:
    batches = data_dir / "cifar10" / "cifar-10-batches-bin"
    write_cifar_batch(batches / "data_batch_1.bin", [0, 1], seed=1)
    write_cifar_batch(batches / "test_batch.bin", [2], seed=2)
    (data_dir / "mnist").mkdir()
    for prefix, count in (("train", 2), ("t10k", 1)):
        write_idx(data_dir / "mnist" / f"{prefix}-images-idx3-ubyte", np.zeros((count, 28, 28)), False)
        write_idx(data_dir / "mnist" / f"{prefix}-labels-idx1-ubyte", np.zeros(count), False)
    assert TEST_SPLITS == ["cifar10", "mnist"]
    for dataset in TEST_SPLITS:
        data = load_dataset(DataSpec(dataset=dataset, root=dataset, val_fraction=0), seed=0)
        assert len(data.val[1]) == 1, dataset
        assert data.num_classes == DATASETS[dataset].classes

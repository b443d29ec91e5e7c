"""cifar10, mnist and image_folder are read from tiny files in their real formats under TRAINYARD_DATA_DIR,
and nothing outside it is read, at load or at submit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

from jobspec.spec import DataSpec
from tests.unit.conftest import job_body
from tests.unit.disk_data import write_cifar_batch, write_idx
from trainers.data import BatchShape, DeviceFeeder, load_dataset

CPU = torch.device("cpu")


def test_cifar10_binary_batches(data_dir: Path) -> None:
    batches = data_dir / "cifar" / "cifar-10-batches-bin"
    first = write_cifar_batch(batches / "data_batch_1.bin", [0, 1, 2, 9], seed=1)
    write_cifar_batch(batches / "data_batch_2.bin", [3, 4], seed=2)
    test = write_cifar_batch(batches / "test_batch.bin", [5, 6, 7], seed=3)

    data = load_dataset(DataSpec(dataset="cifar10", root="cifar"), seed=0)
    train_x, train_y = data.train
    assert train_x.dtype == torch.uint8 and train_x.shape == (6, 3, 32, 32)
    assert train_y.tolist() == [0, 1, 2, 9, 3, 4] and data.val[1].tolist() == [5, 6, 7]
    assert np.array_equal(train_x[:4].numpy(), first) and np.array_equal(data.val[0].numpy(), test)
    assert (data.num_classes, data.channels, data.native_size) == (10, 3, 32)


def test_a_truncated_cifar10_batch_is_refused(data_dir: Path) -> None:
    (data_dir / "cifar").mkdir()
    (data_dir / "cifar" / "data_batch_1.bin").write_bytes(b"\0" * 3074)
    with pytest.raises(ValueError, match="binary version"):
        load_dataset(DataSpec(dataset="cifar10", root="cifar"), seed=0)


@pytest.mark.parametrize("compress", [False, True])
def test_mnist_idx_files(data_dir: Path, compress: bool) -> None:
    root = data_dir / "mnist"
    root.mkdir()
    rng = np.random.default_rng(0)
    train_images = rng.integers(0, 256, (5, 28, 28))
    write_idx(root / "train-images-idx3-ubyte", train_images, compress)
    write_idx(root / "train-labels-idx1-ubyte", np.array([0, 1, 2, 3, 9]), compress)
    write_idx(root / "t10k-images-idx3-ubyte", rng.integers(0, 256, (2, 28, 28)), compress)
    write_idx(root / "t10k-labels-idx1-ubyte", np.array([4, 5]), compress)

    data = load_dataset(DataSpec(dataset="mnist", root="mnist"), seed=0)
    assert data.train[0].shape == (5, 1, 28, 28) and data.train[0].dtype == torch.uint8
    assert np.array_equal(data.train[0][:, 0].numpy(), train_images)
    assert data.train[1].tolist() == [0, 1, 2, 3, 9] and data.val[1].tolist() == [4, 5]


def test_image_folder_decodes_resizes_and_holds_out(data_dir: Path) -> None:
    for label, name in enumerate(["cat", "dog", "emu"]):
        (data_dir / "pets" / name).mkdir(parents=True)
        for i in range(4):
            color = (80 * label, 10 * i, 200)
            Image.new("RGB", (20 + i, 17), color).save(data_dir / "pets" / name / f"{i}.png")
    (data_dir / "pets" / "cat" / "notes.txt").write_text("not an image")
    spec = DataSpec(dataset="image_folder", root="pets", image_size=16, val_fraction=0.25, loader_workers=1)

    data = load_dataset(spec, seed=0)
    assert data.num_classes == 3
    assert data.train[0].shape == (9, 3, 16, 16) and data.val[0].shape == (3, 3, 16, 16)
    images = torch.cat([data.train[0], data.val[0]])
    labels = torch.cat([data.train[1], data.val[1]])
    assert sorted(labels.tolist()) == [0] * 4 + [1] * 4 + [2] * 4
    assert (images[:, 0, 8, 8] == labels * 80).all()  # each class's red value survived decoding


def test_uint8_images_become_normalised_floats_per_batch() -> None:
    x = torch.tensor([0, 255], dtype=torch.uint8).view(2, 1, 1, 1).expand(2, 1, 4, 4).contiguous()
    feeder = DeviceFeeder((x, torch.tensor([0, 1])), BatchShape(8, 3, False), CPU, CPU)
    batch, _ = feeder.fetch(torch.tensor([0, 1]))
    assert batch.dtype == torch.float32 and batch.shape == (2, 3, 8, 8)
    assert batch[0].max() < -1.9 and batch[1].min() > 1.9


def test_a_root_that_escapes_through_a_symlink_is_refused(data_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write_cifar_batch(outside / "data_batch_1.bin", [1], seed=0)
    (data_dir / "sneaky").symlink_to(outside)
    with pytest.raises(ValueError, match="outside TRAINYARD_DATA_DIR"):
        load_dataset(DataSpec(dataset="cifar10", root="sneaky"), seed=0)


@pytest.mark.parametrize("root, message", [("missing", "not a directory"), ("sneaky", "outside")])
def test_submit_refuses_a_missing_or_escaping_root(
    data_dir: Path, tmp_path: Path, client: TestClient, root: str, message: str
) -> None:
    (tmp_path / "outside").mkdir()
    (data_dir / "sneaky").symlink_to(tmp_path / "outside")
    response = client.post("/v1/jobs", json=job_body(data={"dataset": "cifar10", "root": root}))
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["errors"][0]["field"] == "data.root" and message in problem["detail"]
    assert str(data_dir) not in problem["detail"]  # the variable's name, not the server's path


def _mnist_files(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    write_idx(root / "train-images-idx3-ubyte", rng.integers(0, 256, (2, 28, 28)), compress=False)
    write_idx(root / "train-labels-idx1-ubyte", np.array([0, 1]), compress=False)
    write_idx(root / "t10k-images-idx3-ubyte", rng.integers(0, 256, (1, 28, 28)), compress=False)
    write_idx(root / "t10k-labels-idx1-ubyte", np.array([2]), compress=False)


def _cifar_files(root: Path) -> None:
    write_cifar_batch(root / "data_batch_1.bin", [0, 1], seed=0)
    write_cifar_batch(root / "test_batch.bin", [2], seed=1)


def _image_files(root: Path) -> None:
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(root / name / "0.png")


# One file of each dataset, under an accepted data.root, is a link to a file outside the data dir.
LINKED = [
    ("mnist", _mnist_files, "train-labels-idx1-ubyte"),
    ("cifar10", _cifar_files, "test_batch.bin"),
    ("image_folder", _image_files, "dog/0.png"),
]


@pytest.mark.parametrize("dataset, write, linked", LINKED)
def test_a_file_linked_outside_the_data_dir_is_refused(
    data_dir: Path, tmp_path: Path, dataset: str, write: Any, linked: str
) -> None:
    write(tmp_path / "outside")
    write(data_dir / "set")
    (data_dir / "set" / linked).unlink()
    (data_dir / "set" / linked).symlink_to(tmp_path / "outside" / linked)
    with pytest.raises(ValueError, match="leading outside TRAINYARD_DATA_DIR") as refused:
        load_dataset(DataSpec(dataset=dataset, root="set", loader_workers=0), seed=0)
    assert f"$TRAINYARD_DATA_DIR/set/{linked}" in str(refused.value)
    assert str(tmp_path) not in str(refused.value)  # no server path in what the job's message shows


@pytest.mark.parametrize("dataset, write, linked", LINKED)
def test_a_file_linked_inside_the_data_dir_is_read(
    data_dir: Path, dataset: str, write: Any, linked: str
) -> None:
    write(data_dir / "elsewhere")
    write(data_dir / "set")
    (data_dir / "set" / linked).unlink()
    (data_dir / "set" / linked).symlink_to(data_dir / "elsewhere" / linked)
    data = load_dataset(DataSpec(dataset=dataset, root="set", loader_workers=0), seed=0)
    assert len(data.train[1]) + len(data.val[1]) > 0


def test_messages_show_the_data_dir_as_its_variable(data_dir: Path) -> None:
    (data_dir / "empty").mkdir()
    with pytest.raises(ValueError) as refused:
        load_dataset(DataSpec(dataset="mnist", root="empty"), seed=0)
    assert "looked in $TRAINYARD_DATA_DIR/empty" in str(refused.value)
    assert str(data_dir) not in str(refused.value)

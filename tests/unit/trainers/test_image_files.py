"""image_folder and shards on disk: tar shards indexed from their headers and read back by offset, the
errors a bad root gives (naming data.root and the fix), and the choice between holding a set whole and
streaming it."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import torch

from jobspec.data_plan import fits
from jobspec.plan import resolve_plan
from jobspec.spec import DataSpec, JobSpec
from tests.unit.trainers.image_sets import Pictures, write_folder, write_shards
from trainers.data import load_dataset
from trainers.data.shards import shard_samples
from trainers.data.streamed import StreamedImages, load_images

PICTURES = Pictures(count=30, classes=3, width=(20, 28), height=(16, 24))


def _tar(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


def test_shards_are_indexed_from_their_headers_and_read_back_by_offset(data_dir: Path) -> None:
    write_shards(data_dir / "set", PICTURES, per_shard=8)
    samples = shard_samples(DataSpec(dataset="shards", root="set"))
    assert len(samples) == 30 and len(samples.tars) == 4
    assert samples.labels.tolist() == [PICTURES.label(i) for i in range(30)]
    assert all(samples.read(i) == PICTURES.jpeg(i) for i in (0, 7, 8, 29))
    assert samples.name(9) == "$TRAINYARD_DATA_DIR/set/shard-00001.tar: sample 0000009"


def test_shards_decode_whole_with_their_classes(data_dir: Path) -> None:
    write_shards(data_dir / "set", PICTURES, per_shard=8)
    data = load_dataset(DataSpec(dataset="shards", root="set", load_size=12, val_fraction=0.2), seed=0)
    assert data.num_classes == 3 and data.train[0].shape == (24, 3, 12, 12) and len(data.val[1]) == 6
    assert data.train[0].dtype == torch.uint8


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({}, "holds no .tar shards"),
        ({"a.tar": {"x.jpg": PICTURES.jpeg(0), "x.cls": b"0", "y.jpg": PICTURES.jpeg(1)}}, "has no y.cls"),
        ({"a.tar": {"x.jpg": PICTURES.jpeg(0), "x.cls": b"cat"}}, "not a class index"),
        ({"a.tar": {"x.jpg": PICTURES.jpeg(0), "x.cls": b"0"}}, "at least 2 classes"),
        ({"a.tar": {"notes.txt": b"no images"}}, "hold no images"),
    ],
)
def test_a_root_without_usable_shards_is_refused_naming_the_fix(
    data_dir: Path, members: dict[str, dict[str, bytes]], message: str
) -> None:
    (data_dir / "set").mkdir()
    for name, contents in members.items():
        _tar(data_dir / "set" / name, contents)
    with pytest.raises(ValueError, match=message) as refused:
        load_dataset(DataSpec(dataset="shards", root="set", loader_workers=0), seed=0)
    assert "data.root" in str(refused.value)


def test_a_file_that_is_no_tar_and_a_shard_linked_outside_are_refused(data_dir: Path, tmp_path: Path) -> None:
    (data_dir / "set").mkdir()
    (data_dir / "set" / "broken.tar").write_bytes(b"not a tar" * 100)
    with pytest.raises(ValueError, match="is not a readable tar file"):
        shard_samples(DataSpec(dataset="shards", root="set"))
    write_shards(tmp_path / "outside", PICTURES, per_shard=30)
    (data_dir / "linked").mkdir()
    (data_dir / "linked" / "a.tar").symlink_to(tmp_path / "outside" / "shard-00000.tar")
    with pytest.raises(ValueError, match="leading outside TRAINYARD_DATA_DIR"):
        shard_samples(DataSpec(dataset="shards", root="linked"))


def test_a_folder_without_images_is_refused(data_dir: Path) -> None:
    for name in ("cat", "dog"):
        (data_dir / "pets" / name).mkdir(parents=True)
    with pytest.raises(ValueError, match=r"data.root \(\$TRAINYARD_DATA_DIR/pets\) holds no images"):
        load_dataset(DataSpec(dataset="image_folder", root="pets"), seed=0)


def test_auto_holds_a_set_whole_when_it_fits_and_stream_streams_it(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_folder(data_dir / "pets", PICTURES)

    def loaded(placement: str) -> object:
        data = {"dataset": "image_folder", "root": "pets", "load_size": 16, "placement": placement}
        spec = JobSpec.model_validate({"model": {"arch": "mlp"}, "data": data})
        return load_images(spec, resolve_plan(spec), torch.device("cpu"))

    assert not isinstance(loaded("auto"), StreamedImages)
    assert "30 images at 16 px take" in capsys.readouterr().out
    streamed = loaded("stream")
    assert isinstance(streamed, StreamedImages) and streamed.num_classes == 3
    assert "decoded per epoch by 2 loader workers" in capsys.readouterr().out


def test_auto_streams_a_set_above_a_quarter_of_the_free_memory() -> None:
    assert fits(1000, 64, free_bytes=4 * 1000 * 3 * 64 * 64)[0]
    held, reason = fits(1000, 64, free_bytes=4 * 1000 * 3 * 64 * 64 - 4)
    assert not held and "1,000 images at 64 px" in reason and "more than 25%" in reason

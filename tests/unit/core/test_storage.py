"""The object store: settings that choose it, the key layout, and each operation against moto."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
from pydantic import ValidationError

from core.config import ArtifactStore, Settings
from core.storage import ObjectStore, locate, object_store

pytest_plugins = ["tests.unit.s3_fixtures"]


def test_shared_is_the_default_and_needs_no_store() -> None:
    settings = Settings()
    assert settings.artifact_store is ArtifactStore.SHARED
    assert object_store(settings) is None
    assert locate(settings, "s3://artifacts/trainyard/1/checkpoints/step-1.pt") is None


def test_s3_needs_a_bucket_and_a_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_ARTIFACT_STORE", "s3")
    with pytest.raises(ValidationError, match="TRAINYARD_S3_BUCKET"):
        Settings()
    monkeypatch.setenv("TRAINYARD_S3_BUCKET", "artifacts")
    assert Settings(s3_prefix="/team/runs/").s3_prefix == "team/runs"
    with pytest.raises(ValidationError, match="TRAINYARD_S3_PREFIX"):
        Settings(s3_prefix="/")


def test_keys_mirror_the_run_directory() -> None:
    store = ObjectStore(client=None, bucket="artifacts", prefix="team/runs")
    key = store.run_key(7, "checkpoints/step-10.pt")
    assert key == "team/runs/7/checkpoints/step-10.pt"
    assert store.run_path(key) == PurePosixPath("7/checkpoints/step-10.pt")
    uri = store.uri(key)
    assert uri == f"s3://artifacts/{key}"
    assert store.key_of(uri) == key
    for foreign in (
        f"s3://other/{key}",
        "s3://artifacts/team/runs-old/7/checkpoints/step-10.pt",  # shares the prefix's first characters
        "/var/runs/7/checkpoints/step-10.pt",
    ):
        assert store.key_of(foreign) is None, foreign


def test_put_head_read_and_delete(s3_store: ObjectStore, tmp_path: Path) -> None:
    file = tmp_path / "rank0.log"
    file.write_bytes(b"0123456789")
    key = s3_store.run_key(1, "logs/rank0.log")
    assert not s3_store.exists(key) and s3_store.metadata(key) is None
    s3_store.put_file(file, key, {"event-time": "1.5"})
    assert s3_store.metadata(key) == {"event-time": "1.5"}
    assert s3_store.read_range(key, 2, 3) == b"234"
    assert s3_store.read_range(key, 8, 100) == b"89"
    assert s3_store.read_range(key, 10, 5) == b"", "a range starting at the end is empty, not an error"
    assert s3_store.read_range(s3_store.run_key(1, "logs/rank9.log"), 0, 5) == b""
    s3_store.delete(key)
    s3_store.delete(key)  # deleting twice is harmless
    assert not s3_store.exists(key)


def test_open_streams_with_its_size_and_download_is_whole(s3_store: ObjectStore, tmp_path: Path) -> None:
    blob = bytes(range(256)) * 9000  # over one stream chunk
    (tmp_path / "step-1.pt").write_bytes(blob)
    key = s3_store.run_key(3, "checkpoints/step-1.pt")
    s3_store.put_file(tmp_path / "step-1.pt", key)
    opened = s3_store.open(key)
    assert opened is not None and opened.name == "step-1.pt" and opened.size == len(blob)
    assert b"".join(opened.chunks) == blob
    assert s3_store.open(s3_store.run_key(3, "checkpoints/gone.pt")) is None
    target = tmp_path / "resume" / "step-1.pt"
    s3_store.download(key, target)
    assert target.read_bytes() == blob
    assert [path.name for path in target.parent.iterdir()] == ["step-1.pt"]


def test_delete_run_removes_only_that_job(s3_store: ObjectStore, tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_bytes(b"x")
    for job_id in (1, 10):
        for name in ("logs/launcher.log", "checkpoints/step-1.pt"):
            s3_store.put_file(file, s3_store.run_key(job_id, name))
    s3_store.delete_run(1)
    listed = s3_store.client.list_objects_v2(Bucket=s3_store.bucket)["Contents"]
    assert sorted(item["Key"] for item in listed) == [
        "trainyard/10/checkpoints/step-1.pt",
        "trainyard/10/logs/launcher.log",
    ]

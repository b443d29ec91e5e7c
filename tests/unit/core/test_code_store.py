"""The code store: content-addressed, read-only bundles; hostile archives refused with nothing written
outside the temporary area; a host without the folder unpacks it from its archive or the object store's."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

from core import code_store
from core.code_unpack import BLOCK, UnsafeArchive
from core.config import Settings, get_settings
from core.storage import ObjectStore
from tests.unit.code_archives import BUNDLE, archive, bundle_archive, code_id, gzip_bomb, member

pytest_plugins = ["tests.unit.s3_fixtures"]

OWNER = "ada"


def store_bytes(settings: Settings, data: bytes, room: int | None = None) -> code_store.Manifest:
    with code_store.incoming(settings, OWNER) as upload:
        upload.write(data)
        return code_store.store(settings, upload, room)


def tree(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def uploads(settings: Settings) -> set[str]:
    """The folders that an upload of OWNER's leaves, empty, under the code directory."""
    return {".incoming", str(code_store.uploads_folder(settings, OWNER).relative_to(settings.code_dir))}


def test_a_bundle_is_stored_read_only_under_its_hash_with_its_archive(env: Settings) -> None:
    data = bundle_archive()
    manifest = store_bytes(env, data)
    folder = code_store.bundle_dir(env, code_id(data))
    assert folder.name == code_id(data).removeprefix("sha256:")
    assert {p: (folder / p).read_text() for p in BUNDLE} == BUNDLE
    # Three files of under a block each and the folder `models`: a block each, as on the disk.
    assert (manifest.file_count, manifest.entries, manifest.unpacked_bytes) == (3, 4, 4 * BLOCK)
    assert {"path": "models/net.py", "size": 10} in manifest.files
    assert stat.S_IMODE((folder / "models/net.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((folder / "train.sh").stat().st_mode) == 0o555  # the exec bit survives
    assert stat.S_IMODE((folder / "models").stat().st_mode) == 0o555
    assert stat.S_IMODE(folder.stat().st_mode) == 0o555  # the top one too: the ranks run as another uid
    kept = code_store.stored_archive(env, code_id(data))
    assert kept == env.code_dir / "archives" / f"{folder.name}.tar.gz" and kept.read_bytes() == data
    # The same bytes again: the same places, and nothing left behind by either push.
    store_bytes(env, data)
    assert tree(env.code_dir) == uploads(env) | {
        "archives",
        f"archives/{folder.name}.tar.gz",
        folder.name,
    } | {f"{folder.name}/{path}" for path in [*BUNDLE, "models"]}


def test_a_plain_tar_is_kept_as_tar(env: Settings) -> None:
    data = bundle_archive(gz=False)
    store_bytes(env, data)
    assert code_store.stored_archive(env, code_id(data)).name.endswith(".tar")  # type: ignore[union-attr]


def test_an_upload_over_the_cap_is_refused_as_it_streams(
    env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_CODE_MAX_BYTES", "1000")
    get_settings.cache_clear()
    with code_store.incoming(get_settings(), OWNER) as upload:
        upload.write(bytes(600))
        with pytest.raises(code_store.ArchiveTooLarge, match="TRAINYARD_CODE_MAX_BYTES"):
            upload.write(bytes(600))
    assert tree(env.code_dir) == uploads(env)


HOSTILE = {
    "dot-dot": ([(member("../escaped.py", b"x"), b"x")], "climbs out of the bundle"),
    "deep dot-dot": ([(member("pkg/../../escaped.py", b"x"), b"x")], "climbs out of the bundle"),
    "absolute": ([(member("{outside}/absolute.py", b"x"), b"x")], "is an absolute path"),
    "symlink out": (
        [
            (member("link", kind=tarfile.SYMTYPE, linkname="{outside}"), b""),
            (member("link/evil.py", b"x"), b"x"),
        ],
        "is a symbolic link",
    ),
    "hardlink": (
        [(member("a.py", b"x"), b"x"), (member("b.py", kind=tarfile.LNKTYPE, linkname="a.py"), b"")],
        "is a hard link",
    ),
    "device": ([(member("null", kind=tarfile.CHRTYPE, devmajor=1, devminor=3), b"")], "is a device file"),
    "fifo": ([(member("pipe", kind=tarfile.FIFOTYPE), b"")], "is a fifo"),
    "twice": (
        [(member("a.py", b"x"), b"x"), (member("a.py", b"y"), b"y")],
        "cannot be unpacked (File exists)",
    ),
    "file under a file": ([(member("a", b"x"), b"x"), (member("a/b.py", b"y"), b"y")], "cannot be unpacked"),
    "too many files": ([(member(f"m{i}.py", b"x"), b"x") for i in range(6)], "more than 5 files and folders"),
    "no files": ([(member("empty", kind=tarfile.DIRTYPE), b"")], "holds no files"),
}


@pytest.fixture
def small_limits(env: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("TRAINYARD_CODE_MAX_FILES", "5")
    monkeypatch.setenv("TRAINYARD_CODE_MAX_UNPACKED_BYTES", str(1 << 20))
    get_settings.cache_clear()
    return get_settings()


def assert_refused_with_nothing_written(settings: Settings, data: bytes, fragment: str) -> None:
    root = settings.code_dir.parent
    before = tree(root)
    with pytest.raises(UnsafeArchive, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        store_bytes(settings, data)
    # Only the empty folders for incoming uploads; no bundle, no archive, no temporary folder left.
    assert tree(root) - before <= {"code", *(f"code/{folder}" for folder in uploads(settings))}, (
        tree(root) - before
    )


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_archives_are_refused_with_nothing_written(small_limits: Settings, case: str) -> None:
    outside = small_limits.code_dir.parent / "outside"
    members, fragment = HOSTILE[case]
    for info, _ in members:
        info.name = info.name.format(outside=outside)
        info.linkname = info.linkname.format(outside=outside)
    assert_refused_with_nothing_written(small_limits, archive(members), fragment)
    assert not outside.exists()


def test_a_gzip_bomb_is_refused_before_it_is_inflated(small_limits: Settings) -> None:
    bomb = gzip_bomb(64 << 20)
    assert len(bomb) < 100_000  # a small upload that claims 64 MiB against a cap of 1 MiB
    assert_refused_with_nothing_written(small_limits, bomb, "unpacks to more than 1048576 bytes")


def test_an_oversized_tar_header_is_refused_before_it_is_read_whole(small_limits: Settings) -> None:
    """tarfile reads a pax record into memory at once: a compressed one could claim gigabytes."""
    data = archive([(member("a.py", b"x"), b"x")], pax={"comment": "x" * (2 << 20)})
    assert len(data) < 100_000
    assert_refused_with_nothing_written(small_limits, data, "tar header or metadata record over")


@pytest.mark.parametrize("data", [b"", b"not an archive", bundle_archive()[:100]])
def test_bytes_that_are_no_tar_are_refused(env: Settings, data: bytes) -> None:
    assert_refused_with_nothing_written(env, data, "not a readable tar")


def test_a_host_without_the_folder_unpacks_it_from_the_archive(env: Settings) -> None:
    data = bundle_archive()
    store_bytes(env, data)
    folder = code_store.bundle_dir(env, code_id(data))
    code_store.remove_tree(folder)
    assert code_store.ensure_unpacked(env, code_id(data)) == folder
    assert (folder / "models/net.py").read_text() == BUNDLE["models/net.py"]
    assert code_store.ensure_unpacked(env, code_id(data)) == folder  # present: nothing to do


def test_an_archive_that_does_not_match_its_id_is_not_unpacked(env: Settings) -> None:
    data = bundle_archive()
    store_bytes(env, data)
    code_store.remove_tree(code_store.bundle_dir(env, code_id(data)))
    kept = code_store.stored_archive(env, code_id(data))
    assert kept is not None
    kept.chmod(0o644)
    kept.write_bytes(bundle_archive({"models/net.py": "import os; os.system('evil')\n"}))
    with pytest.raises(code_store.BundleUnavailable, match="does not match") as refused:
        code_store.ensure_unpacked(env, code_id(data))
    assert str(env.code_dir) not in str(refused.value)  # a job's message shows no server path
    assert not code_store.bundle_dir(env, code_id(data)).exists()


def test_a_bundle_nowhere_is_unavailable_with_the_fix(env: Settings) -> None:
    with pytest.raises(code_store.BundleUnavailable, match="trainyard code push DIR") as refused:
        code_store.ensure_unpacked(env, code_id(b"never pushed"))
    assert "TRAINYARD_CODE_DIR" in str(refused.value) and str(env.code_dir) not in str(refused.value)


def test_another_host_fetches_the_archive_from_the_object_store(
    env: Settings, s3_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bundle_archive()
    store_bytes(get_settings(), data)
    key = s3_store.code_key(code_id(data).removeprefix("sha256:"))
    assert s3_store.client.get_object(Bucket=s3_store.bucket, Key=key)["Body"].read() == data
    monkeypatch.setenv("TRAINYARD_CODE_DIR", str(tmp_path / "other-host"))
    get_settings.cache_clear()
    other = get_settings()
    folder = code_store.ensure_unpacked(other, code_id(data))
    assert folder.is_relative_to(tmp_path / "other-host")
    assert (folder / "models/net.py").read_text() == BUNDLE["models/net.py"]
    assert code_store.stored_archive(other, code_id(data)) is not None
    code_store.remove(other, code_id(data))
    assert not folder.exists() and not s3_store.exists(key)
    assert os.listdir(tmp_path / "other-host" / "archives") == []

"""What a bundle may make on disk: every file and folder counts against TRAINYARD_CODE_MAX_FILES, the folders
its paths only imply too; bytes are charged as the disk holds them, within what the owner's quota leaves;
paths are bounded in depth and length; and uploads in progress are counted per owner while they arrive."""

from __future__ import annotations

import os
import tarfile
import time

import pytest

from core import code_store
from core.code_unpack import BLOCK, MAX_DEPTH, MAX_PATH_CHARS, QuotaPassed, UnsafeArchive
from core.config import Settings, get_settings
from tests.unit.code_archives import archive, gzip_bomb, member
from tests.unit.core.test_code_store import assert_refused_with_nothing_written, store_bytes


def capped(monkeypatch: pytest.MonkeyPatch, max_files: int) -> Settings:
    monkeypatch.setenv("TRAINYARD_CODE_MAX_FILES", str(max_files))
    get_settings.cache_clear()
    return get_settings()


def files_under_implied_folders(count: int, depth: int) -> bytes:
    """`count` empty files, each `depth` folders down a path of its own that no member lists."""
    below = "/".join(str(level) for level in range(1, depth))
    return archive([(member(f"d{i}/{below}/f.py"), b"") for i in range(count)])


def test_implied_folders_count_against_the_files_cap(env: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    data = files_under_implied_folders(12, depth=3)  # 12 files and 36 folders no member lists
    assert_refused_with_nothing_written(capped(monkeypatch, 47), data, "more than 47 files and folders")
    manifest = store_bytes(capped(monkeypatch, 48), data)
    assert (manifest.file_count, manifest.entries, manifest.unpacked_bytes) == (12, 48, 48 * BLOCK)


def test_a_folder_counts_once_whether_listed_or_implied(env: Settings) -> None:
    listed = [
        (member("pkg", kind=tarfile.DIRTYPE), b""),
        (member("pkg/sub/a.py", b"A = 1\n"), b"A = 1\n"),
        (member("pkg/sub", kind=tarfile.DIRTYPE), b""),  # listed after a file implied it
        (member("pkg/sub/b.py"), b""),
    ]
    manifest = store_bytes(env, archive(listed))
    assert (manifest.file_count, manifest.entries, manifest.unpacked_bytes) == (2, 4, 4 * BLOCK)


def test_a_tiny_archive_of_many_implied_folders_is_refused_at_the_cap(
    env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reported bomb, scaled down: a few KiB of headers whose paths imply ten times the cap in folders;
    the unpacker stops at the cap rather than making them all."""
    data = files_under_implied_folders(200, depth=10)  # 2,000 files and folders from 200 members
    assert len(data) < 10_000
    assert_refused_with_nothing_written(capped(monkeypatch, 500), data, "more than 500 files and folders")


def test_files_and_folders_are_charged_in_whole_blocks(env: Settings) -> None:
    sizes = {"empty.py": 0, "one.py": 1, "block.bin": BLOCK, "more.bin": BLOCK + 1}
    members = [(member(f"pkg/{name}", bytes(size)), bytes(size)) for name, size in sizes.items()]
    manifest = store_bytes(env, archive(members))
    assert manifest.unpacked_bytes == (1 + 1 + 1 + 2 + 1) * BLOCK  # the files' blocks and `pkg`'s


def test_a_path_deeper_than_the_cap_is_refused_naming_it(env: Settings) -> None:
    deepest = "/".join(["d"] * (MAX_DEPTH - 1) + ["f.py"])
    assert store_bytes(env, archive([(member(deepest), b"")])).entries == MAX_DEPTH
    data = archive([(member("/".join(["d"] * 1_000 + ["f.py"])), b"")])
    assert_refused_with_nothing_written(env, data, f"is 1001 levels deep, over the {MAX_DEPTH}")
    with pytest.raises(UnsafeArchive) as refused:
        store_bytes(env, data)
    assert str(refused.value).startswith("'d/d/d/d/d/") and len(str(refused.value)) < 400  # named, shortened


def test_a_path_longer_than_the_cap_is_refused(env: Settings) -> None:
    long = "/".join(["n" * 200] * 6 + ["f.py"])
    assert len(long) > MAX_PATH_CHARS
    data = archive([(member(long), b"")])
    assert_refused_with_nothing_written(env, data, f"of {len(long)} characters, over the {MAX_PATH_CHARS}")


def test_unpacking_stops_where_the_quota_ends(env: Settings) -> None:
    with pytest.raises(QuotaPassed) as passed:
        store_bytes(env, gzip_bomb(1 << 20), room=512 << 10)
    assert passed.value.charged == 1 << 20
    assert not any(path.is_file() or path.name.startswith(".unpack-") for path in env.code_dir.rglob("*"))


def test_uploads_in_progress_are_counted_per_owner(env: Settings) -> None:
    with (
        code_store.incoming(env, "ada") as first,
        code_store.incoming(env, "ada") as second,
        code_store.incoming(env, "bob") as other,
    ):
        first.write(bytes(1000))
        second.write(bytes(300))
        other.write(bytes(5000))
        assert code_store.receiving_bytes(env, "ada") == 1300
        assert (first.pending(), second.pending(), other.pending()) == (1300, 1300, 5000)
        # A file untouched for longer than an upload may last is a dead process's leftover, not an upload.
        stale = time.time() - env.code_upload_timeout_s - 1
        os.utime(second.path, (stale, stale))
        assert code_store.receiving_bytes(env, "ada") == 1000
    assert code_store.receiving_bytes(env, "ada") == code_store.receiving_bytes(env, "bob") == 0

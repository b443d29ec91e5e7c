"""POST /v1/code against what lands on disk: unpacked bytes count against the user's quota, uploads count
while they arrive and have a deadline, and a path too deep is a 422; each refusal a problem+json that leaves
no row, no bundle, no archive and no upload behind."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from core import code_store
from core.code_unpack import MAX_DEPTH
from core.config import Settings, get_settings
from tests.unit.code_archives import archive, bundle_archive, code_id, gzip_bomb, member

GZIP = {"Content-Type": "application/gzip"}
OWNER = "local"  # who every request is with auth off
CHUNK = 100_000


def configured(monkeypatch: pytest.MonkeyPatch, **values: str) -> Settings:
    for name, value in values.items():
        monkeypatch.setenv(f"TRAINYARD_{name.upper()}", value)
    get_settings.cache_clear()
    return get_settings()


def leftovers(settings: Settings) -> list[Path]:
    """Anything a refused push could leave: an upload's file, a temporary unpack folder."""
    code = settings.code_dir
    return [*(p for p in (code / ".incoming").rglob("*") if p.is_file()), *code.glob(".unpack-*")]


def assert_refused(response: httpx.Response, status: int, *fragments: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    for fragment in fragments:
        assert fragment in response.json()["detail"], response.json()["detail"]


def test_unpacked_bytes_count_against_the_quota(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report: three archives of a few KiB that unpack to far more than their quota."""
    configured(monkeypatch, code_quota_bytes=str(5 << 19))  # 2.5 MiB
    client = TestClient(create_app())
    bombs = [gzip_bomb((1 << 20) + extra) for extra in range(3)]  # 1 MiB of zeros each, a few KiB packed
    assert all(len(bomb) < 5_000 for bomb in bombs)
    for bomb in bombs[:2]:
        stored = client.post("/v1/code", content=bomb, headers=GZIP)
        assert stored.status_code == 201 and stored.json()["unpacked_bytes"] >= 1 << 20, stored.text
    refused = client.post("/v1/code", content=bombs[2], headers=GZIP)
    assert_refused(refused, 429, "TRAINYARD_CODE_QUOTA_BYTES=2621440", "trainyard code rm ID")
    assert client.get("/v1/code").json()["count"] == 2
    assert not code_store.is_stored(settings, code_id(bombs[2]))
    assert leftovers(settings) == []


def test_an_upload_that_stalls_past_its_deadline_is_408_and_removed(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured(monkeypatch, code_upload_timeout_s="0.5")
    data = bundle_archive()

    async def stalling() -> AsyncIterator[bytes]:
        yield data[:100]
        await anyio.sleep(3)  # past the deadline: the server stops waiting
        yield data[100:]

    async def push() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.post("/v1/code", content=stalling(), headers=GZIP)

    assert_refused(anyio.run(push), 408, "TRAINYARD_CODE_UPLOAD_TIMEOUT_S=0.5 s", "(100 bytes had)")
    assert leftovers(settings) == []
    assert TestClient(create_app()).get("/v1/code").json()["count"] == 0


async def received(settings: Settings, total: int) -> None:
    """Until the server has written `total` bytes of OWNER's uploads in progress."""
    with anyio.fail_after(10):
        while code_store.receiving_bytes(settings, OWNER) < total:
            await anyio.sleep(0.01)


def test_uploads_in_progress_count_against_the_quota(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report: twelve uploads held open together passed the quota; the eleventh now finds it full."""
    configured(monkeypatch, code_quota_bytes=str(10 * CHUNK))
    release = anyio.Event()
    statuses: list[int] = []
    details: list[str] = []

    async def held_open() -> AsyncIterator[bytes]:
        yield os.urandom(CHUNK)
        await release.wait()

    async def upload(client: httpx.AsyncClient) -> None:
        response = await client.post("/v1/code", content=held_open(), headers=GZIP)
        statuses.append(response.status_code)
        details.append(response.json()["detail"])

    async def twelve() -> None:
        transport = httpx.ASGITransport(app=create_app())
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://testserver") as client,
            anyio.create_task_group() as uploads,
        ):
            for count in range(1, 11):
                uploads.start_soon(upload, client)
                await received(settings, count * CHUNK)
            for _ in range(2):  # each past the quota with the ten in progress: answered while they wait
                with anyio.fail_after(10):
                    await upload(client)
            assert code_store.receiving_bytes(settings, OWNER) == 10 * CHUNK
            release.set()

    anyio.run(twelve)
    assert statuses == [429, 429] + [422] * 10  # the ten end as what they sent: no archive
    assert "your uploads in progress" in details[0] and "TRAINYARD_CODE_QUOTA_BYTES=1000000" in details[0]
    assert leftovers(settings) == []


def test_a_path_a_thousand_folders_deep_is_422_naming_it(settings: Settings) -> None:
    deep = "/".join(["d"] * 1_000 + ["f.py"])
    refused = TestClient(create_app()).post("/v1/code", content=archive([(member(deep), b"")]), headers=GZIP)
    assert_refused(refused, 422, "'d/d/d/d/", f"is 1001 levels deep, over the {MAX_DEPTH}")
    assert refused.json()["errors"][0]["field"] == "body"
    assert leftovers(settings) == []


_recording: list[list[str]] = []  # the lists of `folders_made` open now


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event == "os.mkdir":
        for made in _recording:
            made.append(str(args[0]))


sys.addaudithook(_audit)  # for good: a hook cannot be removed; it records only inside `folders_made`


@contextmanager
def folders_made() -> Iterator[list[str]]:
    """Every folder this process makes meanwhile, by any code: os.mkdir's audit event."""
    made: list[str] = []
    _recording.append(made)
    try:
        yield made
    finally:
        _recording.remove(made)


def unpacked(made: list[str]) -> list[str]:
    """Of the folders made, those of an unpacking: its temporary folder and what it holds."""
    return [path for path in made if ".unpack-" in path]


def test_a_tiny_archive_of_deep_implied_folders_is_422_before_a_folder_is_made(settings: Settings) -> None:
    """The report: 200 paths 60 folders deep, a 3 KB archive, cost ~30 s of folders made and removed before
    its 422. Their names alone imply 12,000 folders, over TRAINYARD_CODE_MAX_FILES."""
    below = "/".join(str(level) for level in range(1, 60))
    data = archive([(member(f"d{i}/{below}/f.py"), b"") for i in range(200)])
    assert len(data) < 3_500
    with folders_made() as made:
        refused = TestClient(create_app()).post("/v1/code", content=data, headers=GZIP)
    assert unpacked(made) == []
    assert_refused(
        refused,
        422,
        "more than 10000 files and folders (TRAINYARD_CODE_MAX_FILES",
        "keep the bundle's folders",
    )
    assert leftovers(settings) == []


def test_the_depth_cap_is_a_setting_named_in_the_422(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured(monkeypatch, code_max_depth="3")
    client = TestClient(create_app())
    assert client.post("/v1/code", content=bundle_archive({"a/b/c.py": ""}), headers=GZIP).status_code == 201
    with folders_made() as made:
        refused = client.post("/v1/code", content=bundle_archive({"a/b/c/d.py": ""}), headers=GZIP)
    assert_refused(refused, 422, "'a/b/c/d.py' is 4 levels deep, over the 3", "(TRAINYARD_CODE_MAX_DEPTH)")
    assert unpacked(made) == []

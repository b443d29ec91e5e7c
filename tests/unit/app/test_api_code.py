"""/v1/code: push, list, show, delete code bundles; their own size cap, quota and ownership; and a spec's
`code` checked at submit."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from app.services import code
from app.services.errors import CodeTooLarge
from core import code_store
from core.code_unpack import BLOCK
from core.config import Settings, get_settings
from core.keys import create_key
from tests.unit.code_archives import BUNDLE, archive, bundle_archive, code_id, member
from tests.unit.conftest import assert_problem, job_body, submit

GZIP = {"Content-Type": "application/gzip"}


def push(client: TestClient, data: bytes, headers: dict[str, str] | None = None) -> str:
    """The pushed bundle's id."""
    response = client.post("/v1/code", content=data, headers=GZIP | (headers or {}))
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def test_push_list_show_delete(client: TestClient, settings: Settings) -> None:
    data = bundle_archive()
    created = client.post("/v1/code", content=data, headers=GZIP)
    assert created.status_code == 201, created.text
    bundle = created.json()
    assert bundle["id"] == code_id(data) and bundle["owner"] == "local"
    assert (bundle["size_bytes"], bundle["file_count"], bundle["jobs"]) == (len(data), 3, [])
    assert {"path": "models/net.py", "size": len(BUNDLE["models/net.py"])} in bundle["files"]
    listed = client.get("/v1/code").json()
    assert listed["count"] == 1 and listed["data"][0]["id"] == bundle["id"]
    assert "files" not in listed["data"][0]  # the list is a summary; GET /v1/code/{id} has the files
    shown = client.get(f"/v1/code/{bundle['id']}")
    assert shown.status_code == 200 and shown.json() == bundle
    folder = code_store.bundle_dir(settings, code_id(data))
    assert folder.is_dir()
    assert client.delete(f"/v1/code/{bundle['id']}").status_code == 204
    assert client.get(f"/v1/code/{bundle['id']}").status_code == 404
    assert client.get("/v1/code").json() == {"data": [], "count": 0}
    assert not folder.exists() and code_store.stored_archive(settings, code_id(data)) is None


def test_the_same_bytes_twice_are_one_bundle(client: TestClient) -> None:
    data = bundle_archive()
    assert client.post("/v1/code", content=data, headers=GZIP).status_code == 201
    again = client.post("/v1/code", content=data, headers={"Content-Type": "application/x-tar"})
    assert again.status_code == 200, again.text
    assert again.json()["id"] == code_id(data)
    assert client.get("/v1/code").json()["count"] == 1


def test_a_bundle_in_use_by_an_unfinished_job_is_not_deleted(client: TestClient) -> None:
    bundle_id = push(client, bundle_archive())
    job = submit(client, code=bundle_id)
    assert job["spec"]["code"] == bundle_id
    assert client.get(f"/v1/code/{bundle_id}").json()["jobs"] == [job["id"]]
    refused = client.delete(f"/v1/code/{bundle_id}")
    assert refused.status_code == 409, refused.text
    assert f"used by job {job['id']} (queued)" in refused.json()["detail"]
    assert client.get(f"/v1/code/{bundle_id}").status_code == 200
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
    assert client.delete(f"/v1/code/{bundle_id}").status_code == 204


def test_another_users_bundle_is_a_404_and_shared_bytes_stay_while_one_owns_them(
    auth_on: Settings, session: Session
) -> None:
    ada, bob, root = (create_key(session, user, admin=user == "root") for user in ("ada", "bob", "root"))
    client = TestClient(create_app())
    data = bundle_archive()
    as_ada, as_bob = {"Authorization": f"Bearer {ada}"}, {"Authorization": f"Bearer {bob}"}
    bundle_id = push(client, data, as_ada)
    for method in ("GET", "DELETE"):
        assert client.request(method, f"/v1/code/{bundle_id}", headers=as_bob).status_code == 404
    assert client.get("/v1/code", headers=as_bob).json()["count"] == 0
    refused = client.post("/v1/jobs", json=job_body(code=bundle_id), headers=as_bob)
    assert_problem(refused, "code", "does not exist or is not yours; push it with `trainyard code push DIR`")
    # Bob pushes the same bytes: a bundle of his own over the same files.
    assert client.post("/v1/code", content=data, headers=GZIP | as_bob).status_code == 201
    everyone = client.get("/v1/code", headers={"Authorization": f"Bearer {root}"}).json()
    assert sorted(bundle["owner"] for bundle in everyone["data"]) == ["ada", "bob"]
    assert client.delete(f"/v1/code/{bundle_id}", headers=as_ada).status_code == 204
    assert code_store.bundle_dir(auth_on, bundle_id).is_dir()  # still Bob's
    assert client.get(f"/v1/code/{bundle_id}", headers=as_bob).json()["owner"] == "bob"
    assert client.delete(f"/v1/code/{bundle_id}", headers=as_bob).status_code == 204
    assert not code_store.bundle_dir(auth_on, bundle_id).exists()


def test_an_archive_has_its_own_cap_apart_from_the_json_limit(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_CODE_MAX_BYTES", str(3 << 20))
    get_settings.cache_clear()
    client = TestClient(create_app())
    # 2 MiB that do not compress: over the 1 MiB that a JSON body may be, under the archive's cap.
    weights = os.urandom(2 << 20)
    big = archive([(member("weights.bin", weights), weights)])
    assert client.post("/v1/code", content=big, headers=GZIP).status_code == 201
    over = archive([(member("weights.bin", weights * 2), weights * 2)])
    declared = client.post("/v1/code", content=over, headers=GZIP)
    assert declared.status_code == 413 and declared.headers["content-type"] == "application/problem+json"
    assert declared.json()["errors"][0]["field"] == "body"
    assert "TRAINYARD_CODE_MAX_BYTES" in declared.json()["detail"]
    chunks = iter([over[i : i + (1 << 20)] for i in range(0, len(over), 1 << 20)])
    streamed = client.post("/v1/code", content=chunks, headers=GZIP)  # no Content-Length: counted as it comes
    assert streamed.status_code == 413, streamed.text
    assert client.get("/v1/code").json()["count"] == 1
    assert not any(path.is_file() for path in (settings.code_dir / ".incoming").rglob("*"))


def test_unsafe_and_unreadable_archives_are_422_naming_the_member(
    client: TestClient, settings: Settings
) -> None:
    escape = archive([(member("../../evil.py", b"x"), b"x")])
    refused = client.post("/v1/code", content=escape, headers=GZIP)
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"] == [
        {"field": "body", "message": refused.json()["detail"].removeprefix("body: ")}
    ]
    assert "'../../evil.py' climbs out of the bundle" in refused.json()["detail"]
    garbage = client.post("/v1/code", content=b"hello", headers=GZIP)
    assert garbage.status_code == 422 and "not a readable tar" in garbage.json()["detail"]
    assert client.get("/v1/code").json()["count"] == 0
    assert sorted(os.listdir(settings.code_dir)) == [".incoming", ".lock"]


def test_a_declared_length_over_the_cap_is_refused_before_a_byte_is_read(settings: Settings) -> None:
    read: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        read.append(b"x")
        yield b"x"

    quota = code.CodeQuota("local", 0, settings.code_quota_bytes, settings.quota_retry_after_s)
    with code_store.incoming(settings, "local") as upload, pytest.raises(CodeTooLarge):
        anyio.run(code.receive, upload, body(), str(settings.code_max_bytes + 1), quota)
    assert read == []


@pytest.mark.parametrize("content_type", [None, "application/json", "application/zip"])
def test_a_body_that_is_not_an_archive_type_is_415(client: TestClient, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    refused = client.post("/v1/code", content=bundle_archive(), headers=headers)
    assert refused.status_code == 415, refused.text
    assert "Content-Type: application/gzip" in refused.json()["detail"]


def test_bundle_bytes_past_the_quota_are_429(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = bundle_archive(), bundle_archive({"main.py": "print('another')\n"})
    # Each bundle takes its archive and a block for each of its files and folders (`models/` in the first).
    takes = [len(first) + 4 * BLOCK, len(second) + BLOCK]
    monkeypatch.setenv("TRAINYARD_CODE_QUOTA_BYTES", str(sum(takes) - 1))
    get_settings.cache_clear()
    client = TestClient(create_app())
    push(client, first)
    refused = client.post("/v1/code", content=second, headers=GZIP)
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == str(settings.quota_retry_after_s)
    assert f"take {takes[0]} bytes" in refused.json()["detail"]
    assert "TRAINYARD_CODE_QUOTA_BYTES" in refused.json()["detail"]
    assert client.post("/v1/code", content=first, headers=GZIP).status_code == 200  # already counted


def test_submit_refuses_an_unknown_bundle(client: TestClient) -> None:
    unknown = code_id(b"never pushed")
    refused = client.post("/v1/jobs", json=job_body(code=unknown))
    assert_problem(refused, "code", f"code bundle {unknown} does not exist or is not yours")
    assert client.get("/v1/jobs").json()["data"] == []


def test_submit_refuses_code_when_user_code_is_off(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle_id = push(TestClient(create_app()), bundle_archive())
    monkeypatch.setenv("TRAINYARD_USER_CODE", "off")
    get_settings.cache_clear()
    client = TestClient(create_app())
    refused = client.post("/v1/jobs", json=job_body(code=bundle_id), params={"dry_run": "true"})
    assert_problem(refused, "code", "user code is off on this server")
    submit(client)  # built-in models still run


def test_a_bad_id_in_the_path_is_422(client: TestClient) -> None:
    refused = client.get("/v1/code/sha256:nothex")
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "code_id"

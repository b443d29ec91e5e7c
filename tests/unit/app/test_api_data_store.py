"""An s3:// data.root at the API (moto's S3 server on loopback): a dry run lists what it found (objects,
bytes) within TRAINYARD_DATA_LIST_MAX_OBJECTS, opening the owner's data.credentials secret; a secret that is
not the caller's, credentials the store refuses, an empty prefix, a cache above the setting and a code bundle
without credentials are refused naming the field; the secret's value is in no answer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings, get_settings
from core.keys import create_key
from core.secrets import new_key
from tests.object_store import BUCKET, Store, credentials, moto_store
from tests.unit.conftest import assert_problem, job_body

OBJECTS, SIZE = 12, 100


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with moto_store() as running:
        client = running.client()
        for i in range(OBJECTS):
            client.put_object(Bucket=BUCKET, Key=f"set/shard-{i:05d}.tar", Body=b"x" * SIZE)
        yield running


@pytest.fixture
def users(
    auth_on: Settings, monkeypatch: pytest.MonkeyPatch, session: Session, store: Store
) -> dict[str, dict[str, str]]:
    monkeypatch.setenv("TRAINYARD_SECRETS_KEY", new_key())
    monkeypatch.setenv("TRAINYARD_DATA_LIST_MAX_OBJECTS", "10")
    get_settings.cache_clear()
    keys = {name: create_key(session, name, admin=False) for name in ("alice", "bob")}
    return {name: {"Authorization": f"Bearer {key}"} for name, key in keys.items()}


def stored_job(root: str, **data: Any) -> dict[str, Any]:
    shards = {"dataset": "shards", "root": root, "credentials": {"secret": "s3-key"}, **data}
    return job_body(model={"arch": "small_cnn"}, data=shards)


def test_a_dry_run_lists_what_the_root_holds_within_the_bound(
    store: Store, users: dict[str, dict[str, str]]
) -> None:
    client = TestClient(create_app())
    value = credentials(store.endpoint)
    made = client.post("/v1/secrets", json={"name": "s3-key", "value": value}, headers=users["alice"])
    assert made.status_code == 201, made.text
    dry = client.post("/v1/jobs?dry_run=true", json=stored_job(f"s3://{BUCKET}/set"), headers=users["alice"])
    assert dry.status_code == 200, dry.text
    found = dry.json()["plan"]["data_found"]
    assert found == {"root": f"s3://{BUCKET}/set/", "objects": 10, "bytes": 10 * SIZE, "complete": False}
    assert "testing" not in dry.text
    refused = client.post("/v1/jobs", json=stored_job(f"s3://{BUCKET}/set"), headers=users["bob"])
    assert_problem(refused, "data.credentials", "you have no secret 's3-key'")


@pytest.mark.parametrize(
    ("value", "root", "data", "field", "fragment"),
    [
        ('{"access_key_id": "x"}', "set", {}, "data.credentials", "wrong: secret_access_key"),
        (None, "empty", {}, "data.root", "holds no objects"),
        (None, "set", {"cache_bytes": 2**40}, "data.cache_bytes", "TRAINYARD_DATA_CACHE_MAX_BYTES"),
    ],
)
def test_what_cannot_be_read_is_refused_naming_the_field(
    store: Store,
    users: dict[str, dict[str, str]],
    value: str | None,
    root: str,
    data: dict[str, Any],
    field: str,
    fragment: str,
) -> None:
    client = TestClient(create_app())
    secret = {"name": "s3-key", "value": value or credentials(store.endpoint)}
    assert client.post("/v1/secrets", json=secret, headers=users["alice"]).status_code == 201
    refused = client.post(
        "/v1/jobs", json=stored_job(f"s3://{BUCKET}/{root}", **data), headers=users["alice"]
    )
    assert_problem(refused, field, fragment)


def test_a_store_that_refuses_the_keys_is_named(store: Store, users: dict[str, dict[str, str]]) -> None:
    client = TestClient(create_app())
    unreachable = credentials("http://127.0.0.1:9")  # nothing listens on the discard port
    assert (
        client.post(
            "/v1/secrets", json={"name": "s3-key", "value": unreachable}, headers=users["alice"]
        ).status_code
        == 201
    )
    refused = client.post("/v1/jobs", json=stored_job(f"s3://{BUCKET}/set"), headers=users["alice"])
    assert_problem(refused, "data.root", "cannot be listed")

"""/v1/secrets and jobs that name them: a value goes in once and never comes out of any route, nor sits in the
database in the clear; another user's secret is answered exactly as a missing one, whether listed, deleted or
named by a job; a server without a key refuses secrets rather than store them in plain text."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings, get_settings
from core.keys import create_key
from core.secrets import new_key
from tests.unit.conftest import assert_problem, job_body

VALUE = "hf_Zq8-not-a-real-token-7f3a9c"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def keyed(auth_on: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("TRAINYARD_SECRETS_KEY", new_key())
    get_settings.cache_clear()
    return get_settings()


@pytest.fixture
def users(keyed: Settings, session: Session) -> dict[str, dict[str, str]]:
    return {
        name: bearer(create_key(session, name, admin=name == "root")) for name in ("root", "alice", "bob")
    }


def test_a_secret_is_stored_sealed_and_never_shown(
    keyed: Settings, users: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    client = TestClient(create_app())
    made = client.post("/v1/secrets", json={"name": "hf-token", "value": VALUE}, headers=users["alice"])
    assert made.status_code == 201, made.text
    assert made.json()["name"] == "hf-token" and made.json()["owner"] == "alice"
    job = client.post(
        "/v1/jobs",
        json=job_body(env={"HF_TOKEN": {"secret": "hf-token"}, "MODE": "fast"}),
        headers=users["alice"],
    )
    assert job.status_code == 201, job.text
    job_id = job.json()["job"]["id"]
    shown = [
        made.text,
        job.text,
        client.get("/v1/secrets", headers=users["alice"]).text,
        client.get(f"/v1/jobs/{job_id}", headers=users["alice"]).text,
        client.get(f"/v1/jobs/{job_id}/events", headers=users["alice"]).text,
        client.get("/v1/jobs", headers=users["alice"]).text,
        client.get("/v1/queue", headers=users["alice"]).text,
    ]
    assert all(VALUE not in text for text in shown)
    # The stored spec keeps the reference, and a plain value as given.
    assert client.get(f"/v1/jobs/{job_id}", headers=users["alice"]).json()["spec"]["env"] == {
        "HF_TOKEN": {"secret": "hf-token"},
        "MODE": "fast",
    }
    database = b"".join(path.read_bytes() for path in tmp_path.glob("trainyard.db*"))
    assert b"hf-token" in database and VALUE.encode() not in database


def test_another_users_secret_is_answered_as_a_missing_one(users: dict[str, dict[str, str]]) -> None:
    client = TestClient(create_app())
    client.post("/v1/secrets", json={"name": "alices", "value": VALUE}, headers=users["alice"])
    assert client.get("/v1/secrets", headers=users["bob"]).json() == {"data": []}
    gone, missing = (
        client.delete(f"/v1/secrets/{name}", headers=users["bob"]) for name in ("alices", "nobodys")
    )
    assert (gone.status_code, missing.status_code) == (404, 404)
    assert gone.json()["detail"].replace("alices", "X") == missing.json()["detail"].replace("nobodys", "X")
    refused = [
        client.post("/v1/jobs", json=job_body(env={"T": {"secret": name}}), headers=users["bob"])
        for name in ("alices", "nobodys")
    ]
    for response in refused:
        assert_problem(response, "env", "env.T: you have no secret")
    assert refused[0].json()["detail"].replace("alices", "X") == refused[1].json()["detail"].replace(
        "nobodys", "X"
    )
    # Bob may have one of the same name: it is his own.
    assert (
        client.post("/v1/secrets", json={"name": "alices", "value": "b"}, headers=users["bob"]).status_code
        == 201
    )
    # An admin sees every name, never a value.
    listed = client.get("/v1/secrets", headers=users["root"])
    assert sorted((s["owner"], s["name"]) for s in listed.json()["data"]) == [
        ("alice", "alices"),
        ("bob", "alices"),
    ]
    assert VALUE not in listed.text


def test_an_admins_shared_secret_is_usable_by_everyone(users: dict[str, dict[str, str]]) -> None:
    client = TestClient(create_app())
    body = {"name": "team-key", "value": VALUE, "shared": True}
    assert client.post("/v1/secrets", json=body, headers=users["alice"]).status_code == 403
    assert client.post("/v1/secrets", json=body, headers=users["root"]).status_code == 201
    assert [s["name"] for s in client.get("/v1/secrets", headers=users["bob"]).json()["data"]] == ["team-key"]
    job = client.post("/v1/jobs", json=job_body(env={"KEY": {"secret": "team-key"}}), headers=users["bob"])
    assert job.status_code == 201, job.text
    # Only its owner deletes it.
    assert client.delete("/v1/secrets/team-key", headers=users["bob"]).status_code == 404


def test_without_a_key_secrets_are_refused_not_stored(auth_on: Settings, session: Session) -> None:
    client = TestClient(create_app())
    response = client.post(
        "/v1/secrets",
        json={"name": "x", "value": VALUE},
        headers=bearer(create_key(session, "a", admin=False)),
    )
    assert response.status_code == 503
    assert "TRAINYARD_SECRETS_KEY" in response.json()["detail"]
    assert client.get("/v1/secrets", headers=bearer(create_key(session, "b", admin=True))).json() == {
        "data": []
    }


def test_reserved_names_and_the_cap_are_refused(
    users: dict[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = TestClient(create_app())
    for name in ("PATH", "LD_PRELOAD", "TRAINYARD_X", "PYTHONPATH", "CUDA_VISIBLE_DEVICES"):
        response = client.post("/v1/jobs", json=job_body(env={name: "x"}), headers=users["alice"])
        assert_problem(response, "env", f"env.{name}: set by Trainyard")
    monkeypatch.setenv("TRAINYARD_SECRETS_MAX_PER_USER", "1")
    get_settings.cache_clear()
    client = TestClient(create_app())
    assert (
        client.post("/v1/secrets", json={"name": "a", "value": "1"}, headers=users["alice"]).status_code
        == 201
    )
    # Setting one again replaces its value: no new one.
    assert (
        client.post("/v1/secrets", json={"name": "a", "value": "2"}, headers=users["alice"]).status_code
        == 201
    )
    over = client.post("/v1/secrets", json={"name": "b", "value": "1"}, headers=users["alice"])
    assert over.status_code == 422 and "TRAINYARD_SECRETS_MAX_PER_USER=1" in over.json()["detail"]

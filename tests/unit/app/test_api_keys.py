"""/v1/keys: admins make keys that work at once and see who holds one; anyone else sees and revokes only their
own; a revoked key is refused once the key cache lapses; a bad user name is a 422 that names `user`."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.api import auth
from app.main import create_app
from app.services.keys import Caller, caller_for_token
from core.config import Settings
from core.keys import TOKEN_PREFIX, create_key, list_keys


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_an_admin_makes_keys_that_authenticate(auth_on: Settings, session: Session) -> None:
    root = create_key(session, "root", admin=True)
    client = TestClient(create_app())
    made = client.post("/v1/keys", json={"user": "bob"}, headers=bearer(root))
    assert made.status_code == 201, made.text
    bob = made.json()
    assert (bob["user"], bob["admin"]) == ("bob", False) and bob["token"].startswith(TOKEN_PREFIX)
    assert caller_for_token(session, bob["token"]) == Caller("bob", is_admin=False)
    assert client.get("/v1/jobs", headers=bearer(bob["token"])).status_code == 200
    # An admin key made through the API makes keys in turn.
    carol = client.post("/v1/keys", json={"user": "carol", "admin": True}, headers=bearer(root)).json()
    assert client.post("/v1/keys", json={"user": "dave"}, headers=bearer(carol["token"])).status_code == 201


def test_the_list_shows_who_holds_a_key_and_no_secret(auth_on: Settings, session: Session) -> None:
    root = create_key(session, "root", admin=True)
    create_key(session, "bob", admin=False)
    listed = TestClient(create_app()).get("/v1/keys", headers=bearer(root))
    assert listed.status_code == 200, listed.text
    data = listed.json()["data"]
    assert [(key["user"], key["admin"]) for key in data] == [("root", True), ("bob", False)]
    assert all(set(key) == {"id", "user", "admin", "created_at"} for key in data)
    assert data[0]["created_at"].endswith("Z")  # UTC, said so (SQLite hands back naive times)


def test_only_admins_make_keys(auth_on: Settings, session: Session) -> None:
    alice = create_key(session, "alice", admin=False)
    client = TestClient(create_app())
    # A bad body too is refused as forbidden: the route's rules are none of a non-admin's business.
    for body in ({"user": "mallory", "admin": True}, {}):
        refused = client.post("/v1/keys", json=body, headers=bearer(alice))
        assert refused.status_code == 403, (body, refused.text)
        assert refused.headers["content-type"] == "application/problem+json"
        assert "only an admin may make API keys, and 'alice' is not one" in refused.json()["detail"]
    assert [key.user for key in list_keys(session)] == ["alice"]


def test_a_revoked_key_is_refused_once_the_key_cache_lapses(
    auth_on: Settings, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, bob = create_key(session, "root", admin=True), create_key(session, "bob", admin=False)
    client = TestClient(create_app())
    assert client.get("/v1/jobs", headers=bearer(bob)).status_code == 200  # now in the API's key cache
    [bob_id] = [key.id for key in list_keys(session, "bob")]
    revoked = client.delete(f"/v1/keys/{bob_id}", headers=bearer(root))
    assert revoked.status_code == 204, revoked.text
    assert list_keys(session, "bob") == []
    now = time.monotonic()
    monkeypatch.setattr(auth.time, "monotonic", lambda: now + auth.KEY_TTL_S)
    refused = client.get("/v1/jobs", headers=bearer(bob))
    assert refused.status_code == 401 and "not valid" in refused.json()["detail"]
    assert client.get("/v1/jobs", headers=bearer(root)).status_code == 200
    again = client.delete(f"/v1/keys/{bob_id}", headers=bearer(root))
    assert again.status_code == 404 and "list the keys you may revoke" in again.json()["detail"]


def test_users_see_and_revoke_only_their_own_keys(auth_on: Settings, session: Session) -> None:
    alice, spare = create_key(session, "alice", admin=False), create_key(session, "alice", admin=False)
    create_key(session, "bob", admin=False)
    client = TestClient(create_app())
    listed = client.get("/v1/keys", headers=bearer(alice)).json()["data"]
    assert [key["user"] for key in listed] == ["alice", "alice"]
    [bob_id] = [key.id for key in list_keys(session, "bob")]
    # Another user's key is a 404, like a missing one, so ids cannot be probed.
    assert client.delete(f"/v1/keys/{bob_id}", headers=bearer(alice)).status_code == 404
    assert client.delete(f"/v1/keys/{listed[1]['id']}", headers=bearer(alice)).status_code == 204
    assert [key.user for key in list_keys(session)] == ["alice", "bob"]
    assert caller_for_token(session, spare) is None and caller_for_token(session, alice) is not None


def test_with_auth_off_the_local_caller_makes_keys(client: TestClient) -> None:
    made = client.post("/v1/keys", json={"user": "ada@lab", "admin": True})
    assert made.status_code == 201, made.text
    assert made.json()["admin"] is True


def test_a_bad_user_name_is_422_naming_user(client: TestClient, session: Session) -> None:
    for user in ("../root", "no spaces", "", "x" * 129):
        refused = client.post("/v1/keys", json={"user": user})
        assert refused.status_code == 422, (user, refused.text)
        [error] = refused.json()["errors"]
        assert error["field"] == "user", error
        assert "is not a valid name: use 1-128 letters" in error["message"]
    assert list_keys(session) == []

"""API keys: made on the server by `python -m core.keys`, hashed at rest, sent as a bearer token, scoping
every job route to its owner."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.api import auth
from app.main import create_app
from app.services.keys import Caller, caller_for_token
from core.config import Settings
from core.keys import TOKEN_PREFIX, create_key, hash_token, main
from core.models import ApiKey
from tests.unit.conftest import job_body


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_keys_are_stored_as_hashes_only(session: Session) -> None:
    token = create_key(session, "alice", admin=False)
    [key] = session.scalars(select(ApiKey)).all()
    assert token not in (key.key_hash, key.user)
    assert key.key_hash == hash_token(token)
    caller = caller_for_token(session, token)
    assert caller is not None and (caller.user, caller.is_admin) == ("alice", False)
    assert caller_for_token(session, token + "x") is None


def test_user_names_are_plain_words(session: Session) -> None:
    with pytest.raises(ValueError, match="not a valid name"):
        create_key(session, "../root", admin=True)


def test_the_management_command_makes_the_first_admin_key(auth_on: Settings, session: Session) -> None:
    # A real process, as an operator runs it on the server: it finds the database through the server's own
    # settings (TRAINYARD_DATABASE_URL, set by the fixture), with no API running.
    made = subprocess.run(
        [sys.executable, "-m", "core.keys", "create", "--user", "ada", "--admin"],
        cwd=Path(__file__).parents[3],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.removesuffix("\n")
    assert token.startswith(TOKEN_PREFIX) and "\n" not in token
    assert "shown this once" in made.stderr
    assert caller_for_token(session, token) == Caller("ada", is_admin=True)
    # It is an admin key: the API lets it make the next ones.
    listed = TestClient(create_app()).get("/v1/keys", headers=bearer(token))
    assert listed.status_code == 200, listed.text
    assert [key["user"] for key in listed.json()["data"]] == ["ada"]


def test_the_management_command_names_a_bad_user(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["create", "--user", "no spaces"])
    assert exited.value.code == 1
    assert "user 'no spaces' is not a valid name: use 1-128 letters" in capsys.readouterr().err


def test_the_management_command_asks_for_migrations(
    env: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["create", "--user", "ada"])
    error = capsys.readouterr().err
    assert exited.value.code == 1
    assert "no such table: api_keys" in error and "make migrate" in error
    assert "sqlite:" not in error  # the URL may carry a password, so it is never printed


def test_no_or_bad_token_is_401_with_a_challenge(auth_on: Settings) -> None:
    client = TestClient(create_app())
    for headers in ({}, bearer("ty_nonsense"), {"Authorization": "Basic YTpi"}):
        response = client.get("/v1/jobs", headers=headers)
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"] == "Bearer"
    assert client.get("/healthz").status_code == 200


def test_jobs_are_scoped_to_their_owner_and_admins_see_all(auth_on: Settings, session: Session) -> None:
    alice, bob, admin = (create_key(session, u, admin=u == "root") for u in ("alice", "bob", "root"))
    client = TestClient(create_app())
    job = client.post("/v1/jobs", json=job_body(), headers=bearer(alice)).json()["job"]
    assert job["id"]
    assert client.get(f"/v1/jobs/{job['id']}", headers=bearer(bob)).status_code == 404
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=bearer(bob)).status_code == 404
    assert client.get("/v1/jobs", headers=bearer(bob)).json()["data"] == []
    assert [j["id"] for j in client.get("/v1/jobs", headers=bearer(alice)).json()["data"]] == [job["id"]]
    assert [j["id"] for j in client.get("/v1/jobs", headers=bearer(admin)).json()["data"]] == [job["id"]]
    assert client.get(f"/v1/jobs/{job['id']}", headers=bearer(admin)).status_code == 200


def test_idempotency_keys_belong_to_one_user(auth_on: Settings, session: Session) -> None:
    alice, bob = (create_key(session, u, admin=False) for u in ("alice", "bob"))
    client = TestClient(create_app())
    key = {"Idempotency-Key": "same"}
    first = client.post("/v1/jobs", json=job_body(), headers={**bearer(alice), **key})
    assert first.status_code == 201
    # Bob's request with Alice's key is a new job of his, not a replay that would reveal hers.
    other = client.post("/v1/jobs", json=job_body(), headers={**bearer(bob), **key})
    assert other.status_code == 201 and other.json()["job"]["id"] != first.json()["job"]["id"]
    replay = client.post("/v1/jobs", json=job_body(), headers={**bearer(alice), **key})
    assert replay.status_code == 200 and replay.json()["job"]["id"] == first.json()["job"]["id"]
    changed = client.post("/v1/jobs", json=job_body(name="other"), headers={**bearer(alice), **key})
    assert changed.status_code == 409


def test_auth_off_acts_as_the_local_admin(client: TestClient) -> None:
    assert client.get("/v1/jobs").status_code == 200


def test_a_valid_key_is_looked_up_once_per_ttl(
    auth_on: Settings, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = create_key(session, "alice", admin=False)
    client = TestClient(create_app())
    assert client.get("/v1/jobs", headers=bearer(token)).status_code == 200
    session.execute(delete(ApiKey))
    session.commit()
    assert client.get("/v1/jobs", headers=bearer(token)).status_code == 200  # still within KEY_TTL_S
    now = time.monotonic()
    monkeypatch.setattr(auth.time, "monotonic", lambda: now + auth.KEY_TTL_S)
    assert client.get("/v1/jobs", headers=bearer(token)).status_code == 401

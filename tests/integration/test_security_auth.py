"""Auth on, through real uvicorn and a real worker: every route but the public ones answers 401 without a
key; another user's job, metrics, logs, events, checkpoints and API keys are 404; lists show only the
caller's jobs and an admin sees all."""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.routing import BaseRoute, Mount, Route

from app.main import create_app
from tests.integration.jobs import example_spec, wait_status
from tests.integration.servers import Stack

QUICK = example_spec("digits_ddp_cpu.json", train={"epochs": 1})
# Public on purpose: liveness, the API's own description, and the dashboard's static page and assets, which
# hold no data (the page calls /v1 with the user's key).
PUBLIC = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/", "/static"}
SECRET = {"secret": "a-secret-of-sixteen-chars"}
ONE_TRIAL = {
    "name": "alices-sweep",
    "spec": QUICK,
    "parameters": {"train.lr": {"type": "float", "low": 0.01, "high": 0.1}},
    "objective": {"metric": "eval_loss"},
    "max_trials": 1,
    "pruner": "none",
}
PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


@dataclass
class Keys:
    alice: str
    bob: str
    admin: str


@pytest.fixture(scope="module")
def keys(auth_stack: Stack) -> Keys:
    """As a deployment gets them: the first admin key from the server's command, the others from the API."""
    admin = auth_stack.admin_key()
    with httpx.Client(base_url=auth_stack.url, timeout=30, headers=bearer(admin)) as client:
        users = [client.post("/v1/keys", json={"user": user}) for user in ("alice", "bob")]
    assert all(made.status_code == 201 for made in users), [made.text for made in users]
    alice, bob = (made.json()["token"] for made in users)
    return Keys(alice, bob, admin)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def alice_job(auth_stack: Stack, keys: Keys) -> dict[str, Any]:
    with httpx.Client(base_url=auth_stack.url, timeout=30, headers=bearer(keys.alice)) as client:
        response = client.post("/v1/jobs", json=QUICK)
        assert response.status_code == 201, response.text
        job = wait_status(client, response.json()["job"]["id"], {"succeeded"})
        [checkpoint, *_] = client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["data"]
        pushed = client.post("/v1/code", content=tiny_bundle(), headers={"Content-Type": "application/gzip"})
        assert pushed.status_code == 201, pushed.text
        [key, *_] = client.get("/v1/keys").json()["data"]  # her own key: the only ones she sees
        hook = client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/hook", "events": ["*"], **SECRET})
        assert hook.status_code == 201, hook.text
        sweep = client.post("/v1/sweeps", json=ONE_TRIAL)
        assert sweep.status_code == 201, sweep.text
        # Its trial need not run.
        assert client.post(f"/v1/sweeps/{sweep.json()['id']}/cancel").status_code == 200
        secret = client.post("/v1/secrets", json={"name": "alices-token", "value": "not for bob"})
        assert secret.status_code == 201, secret.text
    ids = {"job_id": job["id"], "checkpoint_id": checkpoint["id"], "code_id": pushed.json()["id"]}
    named = {"name": secret.json()["name"]}  # a secret's, the one route parameter that is a name
    return {
        **ids,
        "key_id": key["id"],
        "webhook_id": hook.json()["id"],
        "sweep_id": sweep.json()["id"],
        **named,
        "host": "gpu-box",  # a GPU's drain and undrain: no user's, an admin's alone
        "index": 0,
    }


def tiny_bundle() -> bytes:
    """A code bundle of one module, as a .tar.gz."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        module = b"def build():\n    return None\n"
        member = tarfile.TarInfo("models.py")
        member.size = len(module)
        tar.addfile(member, io.BytesIO(module))
    return archive.getvalue()


def flatten(routes: list[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str]]:
    for route in routes:
        # FastAPI >= 0.16x keeps an included router whole, with its prefix beside it.
        included = getattr(route, "include_context", None)
        if included is not None:
            yield from flatten(included.included_router.routes, prefix + included.prefix)
        elif isinstance(route, Mount):
            yield "GET", prefix + route.path
        elif isinstance(route, Route):
            for method in sorted(route.methods or {"GET"}):
                if method != "HEAD":
                    yield method, prefix + route.path


def app_routes() -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, those hidden from the OpenAPI schema included."""
    return list(flatten(create_app().routes))


# Routes with a parameter that names no user's resource, which only an admin may call.
ADMINS_ONLY = "/v1/gpus/"


def fill(path: str, ids: dict[str, Any]) -> str:
    return PARAM.sub(lambda m: str(ids[m.group(1)]), path)


def test_every_route_needs_a_key(auth_stack: Stack, alice_job: dict[str, Any]) -> None:
    walked = 0
    with httpx.Client(base_url=auth_stack.url, timeout=30) as client:
        for method, path in app_routes():
            if path in PUBLIC:
                continue
            for headers in ({}, bearer("ty_not-a-key")):
                response = client.request(method, fill(path, alice_job), headers=headers, json={})
                assert response.status_code == 401, (method, path, response.status_code, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
            walked += 1
        assert client.get("/healthz").status_code == 200
    assert walked >= 10, walked


def test_another_users_job_is_404_on_every_route(
    auth_stack: Stack, keys: Keys, alice_job: dict[str, Any]
) -> None:
    scoped = [(m, p) for m, p in app_routes() if PARAM.search(p) and p.startswith("/v1/")]
    assert any("checkpoint_id" in p for _, p in scoped) and any("logs" in p for _, p in scoped)
    with httpx.Client(base_url=auth_stack.url, timeout=30, headers=bearer(keys.bob)) as bob:
        for method, path in scoped:
            body = {"priority": 1} if method == "PATCH" else None
            response = bob.request(method, fill(path, alice_job), json=body)
            expected = 403 if path.startswith(ADMINS_ONLY) else 404
            assert response.status_code == expected, (method, path, response.status_code, response.text)
        assert bob.get("/v1/jobs").json()["data"] == []
        assert bob.get("/v1/queue").json()["data"] == []
    with httpx.Client(base_url=auth_stack.url, timeout=30, headers=bearer(keys.alice)) as alice:
        assert alice.get(f"/v1/jobs/{alice_job['job_id']}/logs", params={"rank": 0}).status_code == 200
        download = alice.get(f"/v1/checkpoints/{alice_job['checkpoint_id']}/download")
        assert download.status_code == 200 and download.content


def test_an_admin_sees_every_job(auth_stack: Stack, keys: Keys, alice_job: dict[str, Any]) -> None:
    with httpx.Client(base_url=auth_stack.url, timeout=30, headers=bearer(keys.admin)) as admin:
        assert alice_job["job_id"] in [job["id"] for job in admin.get("/v1/jobs").json()["data"]]
        assert admin.get(f"/v1/jobs/{alice_job['job_id']}/metrics").status_code == 200


def test_resume_from_another_users_checkpoint_is_refused(
    auth_stack: Stack, keys: Keys, alice_job: dict[str, Any]
) -> None:
    spec = {**QUICK, "checkpoint": {"resume_from": alice_job["checkpoint_id"]}}
    with httpx.Client(base_url=auth_stack.url, timeout=30, headers=bearer(keys.bob)) as bob:
        response = bob.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "checkpoint.resume_from"

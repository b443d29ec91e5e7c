"""Text a database cannot store (NUL, a lone surrogate) is refused by one guard on every route that takes a
body (issue 42 #7): a 422 naming the field and the fix, and nothing stored. The routes are read from the app,
so a route added without the guard fails here."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.api.guards import STATE_CHANGING
from app.main import create_app
from core import db
from core.config import Settings
from core.models import Base
from tests.unit.app.test_sweeps_api import sweep_body
from tests.unit.app.test_webhooks_api import PUBLIC
from tests.unit.app.test_webhooks_api import body as webhook_body
from tests.unit.conftest import assert_problem, enqueued, job_body, submit

# Its body is a tar archive, streamed and capped by the route, not JSON: the guard does not read it.
ARCHIVE_ROUTES = {("POST", "/v1/code")}
# What each bad string is called in the 422, and the fix it names.
BAD = {"\x00": ("NUL", "remove it"), "\ud800": ("surrogate", "send valid UTF-8 text")}


def body_routes() -> list[tuple[str, str]]:
    """(method, path) of every route that may take a body, path parameters filled with 1. From the app's
    OpenAPI document: FastAPI keeps included routers' routes out of `app.routes`, and every route that takes
    a body is in the document (the API's clients and its schemathesis test read it)."""
    found = {
        (method.upper(), re.sub(r"\{[^}]+\}", "1", path))
        for path, operations in create_app().openapi()["paths"].items()
        for method in operations
        if method.upper() in STATE_CHANGING
    }
    return sorted(found - ARCHIVE_ROUTES)


def post_json(client: TestClient, method: str, url: str, body: Any) -> Any:
    """`body` as JSON with \\u escapes: a lone surrogate cannot be sent as UTF-8."""
    content = json.dumps(body)
    return client.request(method, url, content=content, headers={"content-type": "application/json"})


def database(settings: Settings) -> tuple[dict[str, list[str]], list[int]]:
    """Every row of every table, and the broker's queue: what a refused request must leave as it was."""
    with db.new_session() as session:
        rows = {
            table.name: sorted(repr(tuple(row)) for row in session.execute(select(table)))
            for table in Base.metadata.sorted_tables
        }
    return rows, enqueued(settings)


def test_the_app_has_the_routes_that_store_text() -> None:
    routes = body_routes()
    for stores in ("/v1/jobs", "/v1/sweeps", "/v1/webhooks", "/v1/keys"):
        assert ("POST", stores) in routes, routes


@pytest.mark.parametrize(
    ("method", "url"), [pytest.param(*route, id=" ".join(route)) for route in body_routes()]
)
def test_every_route_refuses_unstorable_text(
    client: TestClient, settings: Settings, method: str, url: str
) -> None:
    submit(client)  # job 1, queued: a route that acts on it would change a row
    before = database(settings)
    for bad, (name, fix) in BAD.items():
        response = post_json(client, method, url, {"name": f"a{bad}b", "more": [{"deep": bad}]})
        assert_problem(response, "name", name)
        assert_problem(response, "more.0.deep", fix)
    assert database(settings) == before


@pytest.mark.parametrize(
    ("url", "body", "field", "bad"),
    [
        ("/v1/jobs", job_body(name="a\ud800"), "name", "\ud800"),
        ("/v1/sweeps", sweep_body(name="lr\x00search"), "name", "\x00"),
        ("/v1/sweeps", sweep_body(spec=job_body(name="trial\x00")), "spec.name", "\x00"),
        (
            "/v1/sweeps",
            sweep_body(spec=job_body(model={"arch": "mlp", "kwargs": {"act": "\ud800"}})),
            "spec.model.kwargs.act",
            "\ud800",
        ),
        ("/v1/webhooks", webhook_body(f"{PUBLIC}\x00"), "url", "\x00"),
        ("/v1/webhooks", webhook_body(f"{PUBLIC}\ud800"), "url", "\ud800"),
        ("/v1/keys", {"user": "al\x00ice"}, "user", "\x00"),
    ],
)
def test_a_valid_body_with_one_bad_string_stores_nothing(
    client: TestClient, settings: Settings, url: str, body: dict[str, Any], field: str, bad: str
) -> None:
    before = database(settings)
    name, fix = BAD[bad]
    response = post_json(client, "POST", url, body)
    assert_problem(response, field, name)
    assert fix in response.json()["detail"]
    assert database(settings) == before


def test_the_same_bodies_without_the_bad_string_are_stored(client: TestClient) -> None:
    """The bodies above are refused for their one bad string, not for anything else."""
    assert post_json(client, "POST", "/v1/sweeps", sweep_body()).status_code == 201
    assert post_json(client, "POST", "/v1/webhooks", webhook_body()).status_code == 201
    assert post_json(client, "POST", "/v1/keys", {"user": "alice"}).status_code == 201


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_body_in_another_unicode_encoding_is_checked_too(
    client: TestClient, settings: Settings, encoding: str
) -> None:
    """json reads UTF-16 and UTF-32 bodies as well; the guard skips only UTF-8 bodies without a \\u escape."""
    before = database(settings)
    for bad, (name, _) in BAD.items():
        content = json.dumps(job_body(name=f"a{bad}b")).encode(encoding)
        response = client.post("/v1/jobs", content=content, headers={"content-type": "application/json"})
        assert_problem(response, "name", name)
    assert database(settings) == before

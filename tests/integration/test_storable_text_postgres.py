"""On PostgreSQL, whose text columns refuse NUL, a webhook URL or a sweep name holding one was a 500 (issue 42
#7): the API's one text guard answers 422 naming the field, and nothing is stored. The same on SQLite, and
on every route, in tests/unit/app/test_storable_text.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.servers import Stack
from tests.unit.app.test_sweeps_api import sweep_body
from tests.unit.conftest import assert_problem
from tests.unit.core.test_webhook_outbox import SECRET

HOOK = {"url": "http://127.0.0.1:9/ho\x00ok", "events": ["*"], "secret": SECRET}


@pytest.mark.parametrize(
    ("url", "body", "field", "table"),
    [
        ("/v1/webhooks", HOOK, "url", "webhooks"),
        ("/v1/sweeps", sweep_body(name="lr\x00search"), "name", "sweeps"),
    ],
)
def test_nul_is_a_422_on_postgresql(
    redis_postgres_stack: Stack, url: str, body: dict[str, Any], field: str, table: str
) -> None:
    before = redis_postgres_stack.sql(f"SELECT count(*) FROM {table}")
    with redis_postgres_stack.client() as client:
        response = client.post(url, content=json.dumps(body), headers={"content-type": "application/json"})
    assert_problem(response, field, "NUL")
    assert redis_postgres_stack.sql(f"SELECT count(*) FROM {table}") == before

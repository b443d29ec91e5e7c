"""Schemathesis against the app's own OpenAPI: no 5xx and every response as documented, per operation and
through stateful sequences (issue 5, case 12)."""

from __future__ import annotations

from collections.abc import Iterator

import hypothesis
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings, get_settings
from core.keys import hash_token
from core.models import ApiKey
from core.secrets import new_key
from tests.unit.conftest import submit

# A fixed token, so the schema (loaded once, at collection) can carry it; each test stores its hash.
TOKEN = "ty_schemathesis"

# The checks that hold the app to its document. Off: positive_data_acceptance, since a spec can match the JSON
# Schema and still be refused (an unknown model.arch, cross-field rules).
CHECKS = {
    "enabled": False,
    **{
        name: {"enabled": True}
        for name in (
            "not_a_server_error",
            "status_code_conformance",
            "content_type_conformance",
            "response_headers_conformance",
            "response_schema_conformance",
            "negative_data_rejection",
            "missing_required_header",
            "ignored_auth",
            "use_after_free",
            "ensure_resource_availability",
        )
    },
}

# The metrics stream answers until its job ends, and here no worker ever ends one. Loaded before any test's
# settings, so by a Host that the default TRAINYARD_ALLOWED_HOSTS allows.
schema = schemathesis.openapi.from_asgi(
    "/openapi.json",
    create_app(),
    headers={"Host": "localhost"},
    config=schemathesis.Config.from_dict(
        {"checks": CHECKS, "auth": {"openapi": {"HTTPBearer": {"bearer": TOKEN}}}}
    ),
).exclude(path_regex=r"/metrics/stream$")

# Few examples and no deadline: the suite shares a small, busy CI machine, and these tests look for wrong
# answers, not slow ones.
FEW = hypothesis.settings(
    max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


@pytest.fixture
def auth_on(settings: Settings, session: Session, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Auth on and a secrets key, as deployed, so requests without a valid key must be refused and secrets
    can be stored. The key's user owns a queued and a cancelled job: generated specs are mostly refused, and
    stateful runs need jobs to link to."""
    session.add(ApiKey(user="schemathesis", key_hash=hash_token(TOKEN), is_admin=False))
    session.commit()
    monkeypatch.setenv("TRAINYARD_AUTH", "on")
    monkeypatch.setenv("TRAINYARD_SECRETS_KEY", new_key())
    get_settings.cache_clear()
    client = TestClient(create_app(), headers={"Authorization": f"Bearer {TOKEN}"})
    submit(client)
    cancelled = submit(client)
    assert client.post(f"/v1/jobs/{cancelled['id']}/cancel").status_code == 200
    yield
    get_settings.cache_clear()


@schema.parametrize()
@FEW
def test_every_operation_answers_as_documented(case: schemathesis.Case, auth_on: None) -> None:
    case.call_and_validate()


def test_stateful_sequences_answer_as_documented(auth_on: None) -> None:
    schema.as_state_machine().run(settings=hypothesis.settings(FEW, max_examples=5, stateful_step_count=6))

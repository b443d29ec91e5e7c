"""The service's footing: health check, the real migration, and no torch in the API process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy import inspect

from app.main import create_app
from core.config import Settings
from core.db import get_engine
from core.models import Base
from tests.unit.conftest import alembic_config

ROOT = Path(__file__).resolve().parents[3]


def test_migration_builds_exactly_the_models_schema(env: Settings) -> None:
    config = alembic_config()
    command.upgrade(config, "head")
    with get_engine().connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []
    # The migrated database serves the API.
    client = TestClient(create_app())
    assert (
        client.post("/v1/jobs", json={"model": {"arch": "mlp"}, "data": {"dataset": "digits"}}).status_code
        == 201
    )
    command.downgrade(config, "base")
    assert inspect(get_engine()).get_table_names() == ["alembic_version"]


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


def test_unknown_route_is_a_problem(client: TestClient) -> None:
    response = client.get("/v1/nope")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert "GET /v1/nope" in response.json()["detail"]


def test_the_api_never_imports_torch() -> None:
    probe = "import sys, app.main; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"

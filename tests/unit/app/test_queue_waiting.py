"""A job waiting for its depends_on is not in line to start: the jobs behind it are not counted behind it in
any view of the queue, and it shows the place it would take; once released it takes its place, on a schema
made by create_all as on a migrated one (migration 0023's trigger)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core import db
from core.config import Settings
from core.models import Base
from tests.unit.app.test_queue_index import _assert_every_view_agrees, _change
from tests.unit.conftest import alembic_config, submit


@pytest.fixture(params=["create_all", "migrated"])
def schema(request: pytest.FixtureRequest, env: Settings) -> Iterator[Session]:
    if request.param == "migrated":
        command.upgrade(alembic_config(), "head")
    else:
        Base.metadata.create_all(db.get_engine())
    with db.new_session() as session:
        yield session


def positions(client: TestClient, ids: list[int]) -> list[int]:
    return [client.get(f"/v1/jobs/{i}").json()["queue_position"] for i in ids]


def test_a_waiting_job_counts_in_no_position_until_released(schema: Session) -> None:
    client = TestClient(create_app())
    first = submit(client)["id"]
    waiting = submit(client, depends_on=[first])["id"]
    last = submit(client)["id"]
    ids = [first, waiting, last]
    _assert_every_view_agrees(client, {}, ids)
    assert positions(client, ids) == [1, 2, 2]
    _change(schema, waiting, waiting_on=0)  # the dependencies' reconciler releases it
    _assert_every_view_agrees(client, {}, ids)
    assert positions(client, ids) == [1, 2, 3]

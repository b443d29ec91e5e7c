"""Migration 0004 gives every existing job the GPUs its stored plan asks for, which the quota now sums."""

from __future__ import annotations

from typing import Any

from alembic import command
from sqlalchemy import MetaData, Table, insert, select
from sqlalchemy.orm import Session

from core.config import Settings
from core.db import get_engine
from core.models import utcnow
from core.quotas import unfinished
from tests.unit.conftest import alembic_config

# (owner, status, stored plan, the GPUs it asks for)
JOBS: list[tuple[str, str, dict[str, Any], int]] = [
    ("ada", "queued", {"num_gpus": 2, "nnodes": 1, "world_size": 2}, 2),
    ("ada", "running", {"num_gpus": 4, "nnodes": 2}, 8),  # 4 on each of 2 hosts
    ("ada", "queued", {"num_gpus": 3}, 3),  # stored before multi-host jobs: one host
    ("ada", "queued", {"num_gpus": 0, "nnodes": 1, "device": "cpu"}, 0),
    ("ada", "queued", {}, 0),  # a plan without num_gpus asks for none
    ("ada", "succeeded", {"num_gpus": 1, "nnodes": 1}, 1),  # finished: filled, not counted
    ("bob", "queued", {"num_gpus": 5, "nnodes": 1}, 5),
]


def test_upgrade_fills_total_gpus_from_each_stored_plan(env: Settings) -> None:
    config = alembic_config()
    command.upgrade(config, "0003")
    jobs = Table("jobs", MetaData(), autoload_with=get_engine())
    with get_engine().begin() as connection:
        for index, (owner, status, plan, _) in enumerate(JOBS):
            row = {"name": f"job{index}", "owner": owner, "status": status, "spec": {}, "plan": plan}
            defaults = {"priority": 0, "attempt": 0, "progress_step": 0, "latest_metrics": {}}
            connection.execute(insert(jobs), row | defaults | {"created_at": utcnow()})
    command.upgrade(config, "head")
    migrated = Table("jobs", MetaData(), autoload_with=get_engine())
    with Session(get_engine()) as session:
        filled = dict(session.execute(select(migrated.c.name, migrated.c.total_gpus)).tuples().all())
        assert filled == {f"job{index}": gpus for index, (*_, gpus) in enumerate(JOBS)}
        # Counted by migration 0028 from the rows stored before it.
        assert unfinished(session, "ada") == (5, 2 + 8 + 3 + 0 + 0)
        assert unfinished(session, "bob") == (1, 5)
    command.downgrade(config, "0003")
    with get_engine().connect() as connection:
        assert "total_gpus" not in Table("jobs", MetaData(), autoload_with=connection).c
        assert connection.execute(select(jobs.c.name)).all(), "the rows survive the way down"

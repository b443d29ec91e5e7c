"""The quota's per-owner figures (owner_unfinished, kept by triggers on jobs: core/quotas.py) equal a count of
each owner's unfinished jobs and a sum of their GPUs after any mix of submissions, transitions, requeues,
deletions and edits, on a schema made by create_all as on a migrated one (migration 0028). The same on
PostgreSQL: tests/integration/test_owner_unfinished_postgres.py."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.orm import Session

from core.config import Settings
from core.db import get_engine
from core.models import Base, utcnow
from core.queue_order import JOBS
from core.quotas import OWNER_UNFINISHED, unfinished
from core.states import TERMINAL, JobStatus
from tests.unit.conftest import alembic_config

OWNERS = ("ada", "bob", "cy")


def recounted(engine: Engine) -> dict[str, tuple[int, int]]:
    """What the quota counted before the triggers: an aggregate over the jobs themselves."""
    query = (
        select(JOBS.c.owner, func.count(), func.coalesce(func.sum(JOBS.c.total_gpus), 0))
        .where(JOBS.c.status.not_in(TERMINAL))
        .group_by(JOBS.c.owner)
    )
    with engine.connect() as connection:
        return {owner: (jobs, gpus) for owner, jobs, gpus in connection.execute(query)}


def kept(engine: Engine) -> dict[str, tuple[int, int]]:
    with Session(engine) as session:
        return {owner: unfinished(session, owner) for owner in OWNERS}


def change_jobs_at_random(engine: Engine, changes: int, seed: int = 7) -> None:
    """`changes` random writes to jobs, each in its own transaction, the kept figures checked after each."""
    rng = random.Random(seed)
    statuses = list(JobStatus)
    for _ in range(changes):
        with engine.begin() as connection:
            ids = connection.execute(select(JOBS.c.id)).scalars().all()
            kind = rng.choice(["submit", "submit", "status", "status", "status", "gpus", "owner", "delete"])
            if kind == "submit" or not ids:
                row = {"name": "j", "owner": rng.choice(OWNERS), "status": rng.choice(statuses), "spec": {}}
                extra = {"plan": {}, "priority": 0, "attempt": 0, "progress_step": 0, "latest_metrics": {}}
                connection.execute(
                    insert(JOBS), row | extra | {"total_gpus": rng.randint(0, 4), "created_at": utcnow()}
                )
                continue
            chosen = JOBS.c.id == rng.choice(ids)
            if kind == "delete":
                connection.execute(delete(JOBS).where(chosen))
                continue
            value = {
                "status": {"status": rng.choice(statuses)},
                "gpus": {"total_gpus": rng.randint(0, 4)},
                "owner": {"owner": rng.choice(OWNERS)},
            }[kind]
            connection.execute(update(JOBS).where(chosen).values(**value))
        expected = recounted(engine)
        assert kept(engine) == {owner: expected.get(owner, (0, 0)) for owner in OWNERS}, kind


@pytest.fixture(params=["create_all", "migrated"])
def engine(request: pytest.FixtureRequest, env: Settings) -> Iterator[Engine]:
    if request.param == "migrated":
        command.upgrade(alembic_config(), "head")
    else:
        Base.metadata.create_all(get_engine())
    yield get_engine()


def test_the_kept_figures_equal_a_recount_after_every_change(engine: Engine) -> None:
    change_jobs_at_random(engine, 150)
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(OWNER_UNFINISHED)).scalar_one() > 0

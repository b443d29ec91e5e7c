"""On PostgreSQL, migration 0028's triggers keep each owner's unfinished jobs and GPUs equal to a recount
after any mix of changes to jobs, as tests/unit/core/test_owner_unfinished.py checks on SQLite. Only the
database and the migrations: no stack."""

from __future__ import annotations

import pytest

from core.db import get_engine
from tests.unit.core.test_owner_unfinished import change_jobs_at_random

pytestmark = pytest.mark.own_services


def test_the_kept_figures_equal_a_recount_after_every_change(postgres_migrated: None) -> None:
    change_jobs_at_random(get_engine(), 150)

"""ix_jobs_waiting: a partial index of the jobs waiting for their depends_on (waiting_on > 0), which GET
/v1/queue reads to place them among the jobs its index lists, where it sorted the whole queue.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | Sequence[str] | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    waiting = sa.text("waiting_on > 0")
    op.create_index(
        "ix_jobs_waiting", "jobs", ["waiting_on"], sqlite_where=waiting, postgresql_where=waiting
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_waiting", table_name="jobs")

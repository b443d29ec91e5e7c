"""lost_attempts: an attempt whose worker was lost, per host, until that host's reaper has stopped its
processes and recorded their events (core/models.py::LostAttempt). The reaper used to do both just after
the requeue's commit, so a reaper killed in between lost them for good when the job was then cancelled.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "lost_attempts",
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("attempt", sa.Integer(), primary_key=True),
        sa.Column("host", sa.String(255), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("lost_attempts")

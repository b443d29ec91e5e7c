"""The GPUs each job asks for as a column, filled from the stored plans, and an index for the quota's checks.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JOBS = sa.table("jobs", sa.column("plan", sa.JSON()), sa.column("total_gpus", sa.Integer()))
# What the quota summed before this column: GPUs per host times hosts; plans stored before multi-host jobs
# have no nnodes and span one host, and a plan without num_gpus asks for none.
_ASKED = sa.func.coalesce(
    _JOBS.c.plan["num_gpus"].as_integer() * sa.func.coalesce(_JOBS.c.plan["nnodes"].as_integer(), 1), 0
)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("total_gpus", sa.Integer(), nullable=False, server_default="0"))
    op.execute(_JOBS.update().values(total_gpus=_ASKED))
    op.create_index("ix_jobs_owner_status_gpus", "jobs", ["owner", "status", "total_gpus"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_jobs_owner_status_gpus", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("total_gpus")

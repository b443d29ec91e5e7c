"""job_secret_values: the secrets' values each launch of a job handed to its ranks, sealed under
TRAINYARD_SECRETS_KEY (core/secrets.py::record_launched), to mask the job's logs even after a secret is
deleted or replaced; deleted with the job.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_secret_values",
        sa.Column("id", sa.Integer(), autoincrement=True),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("sealed", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_job_secret_values_job_id", "job_secret_values", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_job_secret_values_job_id", table_name="job_secret_values")
    op.drop_table("job_secret_values")

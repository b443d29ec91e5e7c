"""gpu_health: the GPUs that are drained or degraded, by NVML's faults, an admin or a job's device errors;
gpu_job_faults: a job's device-error failures per GPU, deleted with the job.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | Sequence[str] | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_health",
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("host", "gpu_index"),
    )
    op.create_table(
        "gpu_job_faults",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "host", "gpu_index"),
    )


def downgrade() -> None:
    op.drop_table("gpu_job_faults")
    op.drop_table("gpu_health")

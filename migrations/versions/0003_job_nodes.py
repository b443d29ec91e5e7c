"""Jobs across hosts: a row per node of a job's attempt, and the address each worker's host is reached at.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_nodes",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("gpu_ids", sa.JSON(), nullable=False),
        sa.Column("rdzv_port", sa.Integer(), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("launched", sa.Boolean(), nullable=False),
        sa.Column("finished", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "node_rank"),
    )
    op.create_index(op.f("ix_job_nodes_host"), "job_nodes", ["host"], unique=False)
    with op.batch_alter_table("workers") as batch:
        batch.add_column(
            sa.Column("address", sa.String(length=255), nullable=False, server_default="127.0.0.1")
        )


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("address")
    op.drop_index(op.f("ix_job_nodes_host"), table_name="job_nodes")
    op.drop_table("job_nodes")

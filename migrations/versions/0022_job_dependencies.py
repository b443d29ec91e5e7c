"""job_dependencies: a spec's depends_on (core/dependencies.py). jobs.waiting_on counts a queued job's
dependencies not met yet, which placement passes over; a job with dependants (has_dependants) sets
dependants_due when it ends, in the transition's UPDATE, and the dependencies' reconciler releases or cancels
its dependants outside that write.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain add_column, as 0019 does: a batch copy of jobs on SQLite would drop the queue's triggers (0017).
    op.add_column("jobs", sa.Column("waiting_on", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("jobs", sa.Column("has_dependants", sa.Boolean(), nullable=False, server_default="0"))
    op.add_column("jobs", sa.Column("dependants_due", sa.Boolean(), nullable=False, server_default="0"))
    op.create_index("ix_jobs_dependants_due", "jobs", ["dependants_due"])
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column(
            "depends_on_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
        ),
    )
    op.create_index("ix_job_dependencies_depends_on_id", "job_dependencies", ["depends_on_id"])


def downgrade() -> None:
    op.drop_index("ix_job_dependencies_depends_on_id", table_name="job_dependencies")
    op.drop_table("job_dependencies")
    op.drop_index("ix_jobs_dependants_due", table_name="jobs")
    for column in ("dependants_due", "has_dependants", "waiting_on"):
        op.drop_column("jobs", column)

"""Slurm executor: the Slurm job id of a job handed to Slurm (worker/slurm/), and how many of Slurm's restarts of
it the worker has seen.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN on SQLite too: a batch copy of `jobs` would drop its AUTOINCREMENT.
    op.add_column("jobs", sa.Column("slurm_job_id", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("slurm_restarts", sa.Integer(), nullable=True))
    op.create_index("ix_jobs_slurm_job_id", "jobs", ["slurm_job_id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_slurm_job_id", table_name="jobs")
    op.drop_column("jobs", "slurm_restarts")
    op.drop_column("jobs", "slurm_job_id")

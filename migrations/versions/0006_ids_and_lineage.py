"""Ids that are never reused and a job's lineage: SQLite AUTOINCREMENT on jobs and checkpoints, and each job's
parent (the job it retries or resumes from) with the retry's generation, unique per parent.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rebuild(autoincrement: bool) -> dict[str, Any]:
    """SQLite takes AUTOINCREMENT only in CREATE TABLE, so there the table is rebuilt; copying its rows in
    with their ids sets sqlite_sequence to the largest. PostgreSQL sequences never hand an id out twice, so
    there the table is altered in place."""
    if op.get_bind().dialect.name != "sqlite":
        return {}
    return {"recreate": "always", "table_kwargs": {"sqlite_autoincrement": autoincrement}}


def upgrade() -> None:
    with op.batch_alter_table("jobs", **_rebuild(autoincrement=True)) as batch:
        batch.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("retry_generation", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_jobs_parent", "jobs", ["parent_id"], ["id"], ondelete="SET NULL")
        batch.create_unique_constraint("uq_jobs_parent_retry", ["parent_id", "retry_generation"])
    with op.batch_alter_table("checkpoints", **_rebuild(autoincrement=True)):
        pass


def downgrade() -> None:
    with op.batch_alter_table("checkpoints", **_rebuild(autoincrement=False)):
        pass
    with op.batch_alter_table("jobs", **_rebuild(autoincrement=False)) as batch:
        batch.drop_constraint("uq_jobs_parent_retry", type_="unique")
        batch.drop_constraint("fk_jobs_parent", type_="foreignkey")
        batch.drop_column("retry_generation")
        batch.drop_column("parent_id")

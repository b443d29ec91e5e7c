"""Checkpoints' sha256, taken by the trainer as it writes each file; null for checkpoints recorded before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _keep_autoincrement() -> dict[str, Any]:
    """SQLite drops a column by rebuilding the table, which must keep 0006's AUTOINCREMENT (no id reused)."""
    if op.get_bind().dialect.name != "sqlite":
        return {}
    return {"table_kwargs": {"sqlite_autoincrement": True}}


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("sha256", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints", **_keep_autoincrement()) as batch:
        batch.drop_column("sha256")

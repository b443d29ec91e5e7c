"""Checkpoint ids never reused, again: 0012 rebuilt `checkpoints` on SQLite without AUTOINCREMENT, undoing
0006, so the newest deleted checkpoint's id went to the next one. The table is rebuilt with it, and copying
its rows in sets sqlite_sequence to their largest id; an id deleted as the newest since 0012 cannot be known.

The other tables whose models promise ids that are never reused (`sqlite_autoincrement` in core/models.py:
jobs, sweeps, webhooks, webhook_deliveries) kept AUTOINCREMENT through every migration, which
tests/unit/core/test_migration_ids_never_reused.py checks after all of them. PostgreSQL's ids come from
sequences, which never hand one out twice, so there nothing changes.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    table_sql = bind.scalar(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'")
    )
    # A schema made by create_all (core/models.py) and stamped has it already.
    if "AUTOINCREMENT" not in table_sql.upper():
        with op.batch_alter_table(
            "checkpoints", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass


def downgrade() -> None:
    """Nothing: 0017's checkpoints without AUTOINCREMENT was the defect, and an id once given stays unique."""

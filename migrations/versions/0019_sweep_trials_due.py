"""sweeps.trials_due: a trial of the sweep ended (or the sweep was made) and its successors are not asked for
yet. A state change records it in its own transaction; the sweeps' reconciler (worker/reconcilers.py) asks
Optuna outside any write and clears it, so a sweep's next trial never holds the database's one writer.
Running sweeps start due, so the reconciler looks at each of them once.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sweeps", sa.Column("trials_due", sa.Boolean(), nullable=False, server_default="0"))
    op.create_index("ix_sweeps_trials_due", "sweeps", ["trials_due"])
    op.execute("UPDATE sweeps SET trials_due = true WHERE status = 'running'")


def downgrade() -> None:
    op.drop_index("ix_sweeps_trials_due", table_name="sweeps")
    op.drop_column("sweeps", "trials_due")

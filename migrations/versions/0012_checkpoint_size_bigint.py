"""A checkpoint's size as a 64-bit integer: a real checkpoint passes 2 GiB, which PostgreSQL's INTEGER refused
(the event's insert failed at every tick, and the job never finished).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.alter_column("size_bytes", type_=sa.BigInteger(), existing_type=sa.Integer())


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.alter_column("size_bytes", type_=sa.Integer(), existing_type=sa.BigInteger())

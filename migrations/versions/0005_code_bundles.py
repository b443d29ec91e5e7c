"""Code bundles: one row per user who pushed an archive, keyed by its sha256 id and that user.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "code_bundles",
        sa.Column("id", sa.String(length=71), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("unpacked_bytes", sa.BigInteger(), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", "owner"),
    )
    op.create_index(op.f("ix_code_bundles_owner"), "code_bundles", ["owner"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_code_bundles_owner"), table_name="code_bundles")
    op.drop_table("code_bundles")

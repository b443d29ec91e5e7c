"""secrets: users' secrets for their jobs' environment, sealed with AES-GCM under TRAINYARD_SECRETS_KEY
(core/secrets.py); the plain value is never stored.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("id", sa.Integer(), autoincrement=True),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("shared", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner", "name", name="uq_secrets_owner_name"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_secrets_shared_name", "secrets", ["shared", "name"])


def downgrade() -> None:
    op.drop_index("ix_secrets_shared_name", table_name="secrets")
    op.drop_table("secrets")

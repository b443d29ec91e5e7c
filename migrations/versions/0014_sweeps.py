"""Sweeps: a search's row, its trials' rows (params, the sampler's and pruner's attributes, how each ended),
and each trial's job named by jobs.sweep_id and jobs.trial, unique together (core/sweeps.py).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


@contextmanager
def _jobs_rebuilt() -> Iterator[Any]:
    """SQLite adds these columns by rebuilding `jobs`, which must keep 0006's AUTOINCREMENT and the largest id
    ever handed out (a deleted newest job's included), so that no id is given twice."""
    if op.get_bind().dialect.name != "sqlite":
        with op.batch_alter_table("jobs") as batch:
            yield batch
        return
    given = _largest_id_given()
    with op.batch_alter_table("jobs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        yield batch
    # The old table's row in sqlite_sequence went with it; the new one's holds at most its largest row's id.
    largest = max(given, _largest_id_given())
    op.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = 'jobs'"))
    op.execute(sa.text(f"INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', {largest})"))


def _largest_id_given() -> int:
    return int(op.get_bind().scalar(sa.text("SELECT max(seq) FROM sqlite_sequence WHERE name = 'jobs'")) or 0)


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_sweeps_owner", "sweeps", ["owner"])
    op.create_table(
        "sweep_trials",
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("system_attrs", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("judged_step", sa.Integer(), nullable=True),
        sa.Column("steps", sa.Integer(), nullable=True),
        sa.Column("total_steps", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("sweep_id", "number"),
    )
    with _jobs_rebuilt() as batch:
        batch.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("trial", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_jobs_sweep", "sweeps", ["sweep_id"], ["id"])
        batch.create_unique_constraint("uq_jobs_sweep_trial", ["sweep_id", "trial"])
        batch.create_index("ix_jobs_sweep_id", ["sweep_id"])


def downgrade() -> None:
    with _jobs_rebuilt() as batch:
        batch.drop_index("ix_jobs_sweep_id")
        batch.drop_constraint("uq_jobs_sweep_trial", type_="unique")
        batch.drop_constraint("fk_jobs_sweep", type_="foreignkey")
        batch.drop_column("trial")
        batch.drop_column("sweep_id")
    op.drop_table("sweep_trials")
    op.drop_index("ix_sweeps_owner", table_name="sweeps")
    op.drop_table("sweeps")

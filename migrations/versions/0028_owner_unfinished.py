"""owner_unfinished: each owner's unfinished jobs and the GPUs they ask for, kept by triggers on jobs, which the
quota reads as one row where it counted the owner's jobs by the index ix_jobs_owner_status_gpus, which goes
(core/models.py gives a schema made by create_all the same triggers). The jobs already stored are counted
here.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | Sequence[str] | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The terminal statuses as of this revision: a job in none of them counts.
_ENDED = "('cancelled', 'failed', 'pruned', 'succeeded', 'timed_out')"
_ADD = """INSERT INTO owner_unfinished (owner, jobs, gpus) SELECT NEW.owner, 1, NEW.total_gpus WHERE {when}
    ON CONFLICT (owner) DO UPDATE SET jobs = owner_unfinished.jobs + 1,
    gpus = owner_unfinished.gpus + excluded.gpus;"""
_TAKE = """UPDATE owner_unfinished SET jobs = jobs - 1, gpus = gpus - OLD.total_gpus
    WHERE owner = OLD.owner AND {when};"""
_SQLITE = (
    f"""CREATE TRIGGER unfinished_insert AFTER INSERT ON jobs WHEN NEW.status NOT IN {_ENDED}
    BEGIN {_ADD.format(when="1")} END""",
    f"""CREATE TRIGGER unfinished_update AFTER UPDATE OF status, owner, total_gpus ON jobs
    WHEN (OLD.status NOT IN {_ENDED}) IS NOT (NEW.status NOT IN {_ENDED})
    OR OLD.owner IS NOT NEW.owner OR OLD.total_gpus IS NOT NEW.total_gpus
    BEGIN {_TAKE.format(when=f"OLD.status NOT IN {_ENDED}")} {_ADD.format(when=f"NEW.status NOT IN {_ENDED}")}
    END""",
    f"""CREATE TRIGGER unfinished_delete AFTER DELETE ON jobs WHEN OLD.status NOT IN {_ENDED}
    BEGIN {_TAKE.format(when="1")} END""",
)
_POSTGRES = (
    f"""CREATE FUNCTION count_unfinished() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'INSERT' THEN {_TAKE.format(when=f"OLD.status NOT IN {_ENDED}")} END IF;
        IF TG_OP <> 'DELETE' THEN {_ADD.format(when=f"NEW.status NOT IN {_ENDED}")} END IF;
        RETURN NULL;
    END $$""",
    f"""CREATE TRIGGER unfinished_insert AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.status NOT IN {_ENDED}) EXECUTE FUNCTION count_unfinished()""",
    f"""CREATE TRIGGER unfinished_update AFTER UPDATE OF status, owner, total_gpus ON jobs FOR EACH ROW
    WHEN ((OLD.status NOT IN {_ENDED}) IS DISTINCT FROM (NEW.status NOT IN {_ENDED})
    OR OLD.owner IS DISTINCT FROM NEW.owner OR OLD.total_gpus IS DISTINCT FROM NEW.total_gpus)
    EXECUTE FUNCTION count_unfinished()""",
    f"""CREATE TRIGGER unfinished_delete AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.status NOT IN {_ENDED}) EXECUTE FUNCTION count_unfinished()""",
)
_TRIGGERS = ("unfinished_insert", "unfinished_update", "unfinished_delete")


def upgrade() -> None:
    op.create_table(
        "owner_unfinished",
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("owner"),
    )
    op.execute(
        "INSERT INTO owner_unfinished (owner, jobs, gpus) SELECT owner, count(*), coalesce(sum(total_gpus), 0)"
        f" FROM jobs WHERE status NOT IN {_ENDED} GROUP BY owner"
    )
    for statement in _POSTGRES if op.get_bind().dialect.name == "postgresql" else _SQLITE:
        op.execute(statement)
    op.drop_index("ix_jobs_owner_status_gpus", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_owner_status_gpus", "jobs", ["owner", "status", "total_gpus"], unique=False)
    postgres = op.get_bind().dialect.name == "postgresql"
    for trigger in _TRIGGERS:
        op.execute(f"DROP TRIGGER {trigger}" + (" ON jobs" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION count_unfinished()")
    op.drop_table("owner_unfinished")

"""Queue changes: a row per change to the queue (a job that enters or leaves it, or changes priority while
in it), written by triggers on jobs, from which the API keeps its index of queue positions current
(app/services/queue_index.py). The same triggers as core/models.py's QueueChange gives a schema made by create_all.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEPT = 1000
_SQLITE_LOG = f"""INSERT INTO queue_changes (version, job_id) SELECT coalesce(max(version), 0) + 1, {{row}}.id
    FROM queue_changes;
    DELETE FROM queue_changes WHERE version <= (SELECT max(version) FROM queue_changes) - {_KEPT};"""
_SQLITE = (
    f"""CREATE TRIGGER queue_change_insert AFTER INSERT ON jobs WHEN NEW.status = 'queued'
    BEGIN {_SQLITE_LOG.format(row="NEW")} END""",
    f"""CREATE TRIGGER queue_change_update AFTER UPDATE OF status, priority ON jobs
    WHEN (OLD.status = 'queued' OR NEW.status = 'queued')
    AND (OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority)
    BEGIN {_SQLITE_LOG.format(row="NEW")} END""",
    f"""CREATE TRIGGER queue_change_delete AFTER DELETE ON jobs WHEN OLD.status = 'queued'
    BEGIN {_SQLITE_LOG.format(row="OLD")} END""",
)
_POSTGRES = (
    f"""CREATE FUNCTION queue_change() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE changed integer;
    BEGIN
        IF TG_OP = 'DELETE' THEN changed := OLD.id; ELSE changed := NEW.id; END IF;
        LOCK TABLE queue_changes IN EXCLUSIVE MODE;
        INSERT INTO queue_changes (version, job_id)
            SELECT coalesce(max(version), 0) + 1, changed FROM queue_changes;
        DELETE FROM queue_changes WHERE version <= (SELECT max(version) FROM queue_changes) - {_KEPT};
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER queue_change_insert AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.status = 'queued') EXECUTE FUNCTION queue_change()""",
    """CREATE TRIGGER queue_change_update AFTER UPDATE OF status, priority ON jobs FOR EACH ROW
    WHEN ((OLD.status = 'queued' OR NEW.status = 'queued')
    AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.priority IS DISTINCT FROM NEW.priority))
    EXECUTE FUNCTION queue_change()""",
    """CREATE TRIGGER queue_change_delete AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.status = 'queued') EXECUTE FUNCTION queue_change()""",
)
_TRIGGERS = ("queue_change_insert", "queue_change_update", "queue_change_delete")


def upgrade() -> None:
    op.create_table(
        "queue_changes",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("version"),
    )
    for statement in _POSTGRES if op.get_bind().dialect.name == "postgresql" else _SQLITE:
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for trigger in _TRIGGERS:
        op.execute(f"DROP TRIGGER {trigger}" + (" ON jobs" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION queue_change()")
    op.drop_table("queue_changes")

"""queue_waiting_on: a job waiting for its depends_on (jobs.waiting_on > 0) is not in line to start, so the
queue's index (app/services/queue_index.py) leaves it out; its trigger on jobs now logs a change of waiting_on
too (a job released), as core/models.py's QueueChange does on a schema made by create_all.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-03
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEPT = 1000
_SQLITE_LOG = f"""INSERT INTO queue_changes (version, job_id) SELECT coalesce(max(version), 0) + 1, NEW.id
    FROM queue_changes;
    DELETE FROM queue_changes WHERE version <= (SELECT max(version) FROM queue_changes) - {_KEPT};"""
# (columns the trigger watches, the condition on them), before and after this revision.
_SQLITE = {
    "0022": (
        "status, priority",
        "OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority",
    ),
    "0023": (
        "status, priority, waiting_on",
        "OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority"
        " OR OLD.waiting_on IS NOT NEW.waiting_on",
    ),
}
_POSTGRES = {
    "0022": (
        "status, priority",
        "OLD.status IS DISTINCT FROM NEW.status OR OLD.priority IS DISTINCT FROM NEW.priority",
    ),
    "0023": (
        "status, priority, waiting_on",
        "OLD.status IS DISTINCT FROM NEW.status OR OLD.priority IS DISTINCT FROM NEW.priority"
        " OR OLD.waiting_on IS DISTINCT FROM NEW.waiting_on",
    ),
}


def _update_trigger(revision: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        columns, changed = _POSTGRES[revision]
        op.execute("DROP TRIGGER queue_change_update ON jobs")
        op.execute(
            f"""CREATE TRIGGER queue_change_update AFTER UPDATE OF {columns} ON jobs FOR EACH ROW
            WHEN ((OLD.status = 'queued' OR NEW.status = 'queued') AND ({changed}))
            EXECUTE FUNCTION queue_change()"""
        )
        return
    columns, changed = _SQLITE[revision]
    op.execute("DROP TRIGGER queue_change_update")
    op.execute(
        f"""CREATE TRIGGER queue_change_update AFTER UPDATE OF {columns} ON jobs
        WHEN (OLD.status = 'queued' OR NEW.status = 'queued') AND ({changed})
        BEGIN {_SQLITE_LOG} END"""
    )


def upgrade() -> None:
    _update_trigger("0023")


def downgrade() -> None:
    _update_trigger("0022")

"""What counts against a user's quotas: their unfinished jobs, however they were made (a submission, a retry,
a sweep's trial), and the GPUs those ask for. The API refuses a job past them (app/services/quotas.py); a
sweep's top-up makes only the trials they leave room for (core/sweeps/asks.py), in the API or the worker.

The figures are kept per owner in owner_unfinished by triggers on the jobs table, whoever changes a job (API,
worker, reaper, a deletion): a submission reads one row, where a count over the owner's unfinished jobs grew
with their queue. The migration 0028 creates the same triggers on a migrated database, and counts the jobs
already stored."""

from __future__ import annotations

from sqlalchemy import DDL, Column, Integer, String, Table, bindparam, event, select
from sqlalchemy.orm import Session

from core.config import Settings
from core.models import Base
from core.states import TERMINAL

OWNER_UNFINISHED = Table(
    "owner_unfinished",
    Base.metadata,
    Column("owner", String(128), primary_key=True),
    Column("jobs", Integer, nullable=False),
    Column("gpus", Integer, nullable=False),
)
_UNFINISHED_OF = select(OWNER_UNFINISHED.c.jobs, OWNER_UNFINISHED.c.gpus).where(
    OWNER_UNFINISHED.c.owner == bindparam("owner")
)

# A job counts while its status is not terminal; a change of status, owner or GPUs moves its count.
_ENDED = "(" + ", ".join(f"'{status}'" for status in sorted(TERMINAL)) + ")"
_ADD = """INSERT INTO owner_unfinished (owner, jobs, gpus) SELECT NEW.owner, 1, NEW.total_gpus WHERE {when}
    ON CONFLICT (owner) DO UPDATE SET jobs = owner_unfinished.jobs + 1,
    gpus = owner_unfinished.gpus + excluded.gpus;"""
_TAKE = """UPDATE owner_unfinished SET jobs = jobs - 1, gpus = gpus - OLD.total_gpus
    WHERE owner = OLD.owner AND {when};"""
_MOVED = "OLD.owner IS NOT NEW.owner OR OLD.total_gpus IS NOT NEW.total_gpus"
_SQLITE_TRIGGERS = (
    f"""CREATE TRIGGER unfinished_insert AFTER INSERT ON jobs WHEN NEW.status NOT IN {_ENDED}
    BEGIN {_ADD.format(when="1")} END""",
    f"""CREATE TRIGGER unfinished_update AFTER UPDATE OF status, owner, total_gpus ON jobs
    WHEN (OLD.status NOT IN {_ENDED}) IS NOT (NEW.status NOT IN {_ENDED}) OR {_MOVED}
    BEGIN {_TAKE.format(when=f"OLD.status NOT IN {_ENDED}")} {_ADD.format(when=f"NEW.status NOT IN {_ENDED}")}
    END""",
    f"""CREATE TRIGGER unfinished_delete AFTER DELETE ON jobs WHEN OLD.status NOT IN {_ENDED}
    BEGIN {_TAKE.format(when="1")} END""",
)
_POSTGRES_TRIGGERS = (
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
    OR {_MOVED.replace("IS NOT", "IS DISTINCT FROM")}) EXECUTE FUNCTION count_unfinished()""",
    f"""CREATE TRIGGER unfinished_delete AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.status NOT IN {_ENDED}) EXECUTE FUNCTION count_unfinished()""",
)
# A schema made by create_all (the unit tests) gets the triggers a migrated one has.
for _dialect, _statements in (("sqlite", _SQLITE_TRIGGERS), ("postgresql", _POSTGRES_TRIGGERS)):
    for _statement in _statements:
        event.listen(Base.metadata, "after_create", DDL(_statement).execute_if(dialect=_dialect))


def unfinished(session: Session, owner: str) -> tuple[int, int]:
    """`owner`'s unfinished jobs, and the GPUs they ask for."""
    row = session.connection().execute(_UNFINISHED_OF, {"owner": owner}).one_or_none()
    return (0, 0) if row is None else (row.jobs, row.gpus)


def job_room(session: Session, settings: Settings, owner: str) -> int:
    """How many more unfinished jobs `owner` may have (TRAINYARD_QUOTA_MAX_JOBS); 0 when none."""
    return max(0, settings.quota_max_jobs - unfinished(session, owner)[0])

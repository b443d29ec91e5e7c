"""/healthz: the process answers, and the database takes a read and a write."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy import false, text, update
from sqlalchemy.exc import SQLAlchemyError

from app.api.deps import SessionDep
from app.schemas import Health
from core.models import Job

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    responses={503: {"model": Health, "description": "the database does not answer, or takes no writes"}},
)
def healthz(session: SessionDep, response: Response) -> Health:
    """A write that changes nothing, then rolled back: SQLite answers reads while another writer holds its
    lock, so only a write shows that a submission would fail now (after TRAINYARD_DB_BUSY_TIMEOUT_S)."""
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return _unavailable(response, f"error: {type(exc).__name__}")
    try:
        session.execute(update(Job).where(false()).values(priority=Job.priority))
    except SQLAlchemyError as exc:
        return _unavailable(response, f"unwritable: {type(exc).__name__}")
    finally:
        session.rollback()
    return Health(status="ok", database="ok")


def _unavailable(response: Response, database: str) -> Health:
    response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Health(status="unavailable", database=database)

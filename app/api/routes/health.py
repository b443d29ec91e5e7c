"""/healthz: the process answers and the database runs a query."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app.api.deps import SessionDep
from app.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", responses={503: {"model": Health, "description": "the database does not answer"}})
def healthz(session: SessionDep, response: Response) -> Health:
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        return Health(status="unavailable", database=f"error: {type(exc).__name__}")
    return Health(status="ok", database="ok")

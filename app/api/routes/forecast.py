"""/v1/forecast: how close each job's forecast (plan.forecast, issue 44) came to what it measured."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import CallerDep, CanonicalInt, SessionDep
from app.schemas import ForecastAccuracy
from app.services.forecast_accuracy import forecast_accuracy

router = APIRouter(prefix="/forecast", tags=["jobs"])

MAX_JOBS = 500


@router.get("/accuracy")
def accuracy(
    session: SessionDep,
    caller: CallerDep,
    limit: Annotated[
        int, CanonicalInt, Query(ge=1, le=MAX_JOBS, description="the newest finished jobs to compare")
    ] = 50,
) -> ForecastAccuracy:
    """The newest finished jobs (succeeded, failed, timed out or cancelled) that had a forecast and
    reported their peak memory and step time, each with forecast / measured ratios, and a summary: the
    median ratios and how many came within 10 % (peak memory) and 20 % (step time). A GPU job's measured
    peak is what its allocator reserved (torch.cuda.max_memory_reserved), a CPU job's its process's
    resident peak. Your own jobs; an admin's, everyone's. Looks back over the newest 10 x limit finished
    jobs at most."""
    return forecast_accuracy(session, caller, limit)

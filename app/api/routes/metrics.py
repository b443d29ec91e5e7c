"""/v1/jobs/{id}/metrics: the reduced metric series a job reported, paged by step."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import DB_INT_MAX, CanonicalInt, OwnedJob, SessionDep
from app.api.openapi import problems
from app.schemas import MetricPublic, MetricsPublic
from app.services.artifacts import list_metrics
from app.services.series import downsample_by_name

router = APIRouter(prefix="/jobs", tags=["metrics"], responses=problems(404))

# With max_points the whole history is read to be shortened; past this many rows it comes in pages still.
MAX_DOWNSAMPLED_ROWS = 200_000


@router.get("/{job_id}/metrics")
def get_metrics(
    job: OwnedJob,
    session: SessionDep,
    name: Annotated[
        str | None, Query(min_length=1, max_length=64, description="one series, e.g. loss")
    ] = None,
    after_step: Annotated[
        int | None,
        CanonicalInt,
        Query(ge=-1, le=DB_INT_MAX, description="only steps after this one: the next_after_step of a page"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    max_points: Annotated[
        int | None,
        Query(
            ge=2,
            le=10_000,
            description="at most this many points per metric name over the whole history (limit is then "
            "ignored): first and last kept, each bucket between keeps its min and max",
        ),
    ] = None,
) -> MetricsPublic:
    scan = limit if max_points is None else MAX_DOWNSAMPLED_ROWS
    rows, next_after_step = list_metrics(session, job.id, name, after_step, scan)
    if max_points is not None:
        rows = downsample_by_name(rows, max_points)
    return MetricsPublic(
        data=[MetricPublic.model_validate(row) for row in rows], next_after_step=next_after_step
    )

"""/v1/jobs/{id}/metrics/stream: a job's metric rows as Server-Sent Events, live until the job ends.

Each row is an `event: metric` whose `id` is its step, so a client that reconnects with `Last-Event-ID`
resumes after that step; a final `event: end` carries the job's terminal status, or `deleted` when the job was
deleted meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from app.api.deps import DB_INT_MAX, CanonicalInt, OwnedJob, SessionDep
from app.api.openapi import problems
from app.schemas import MetricPublic, StreamEnd
from core.db import new_session
from core.models import Job, Metric
from core.states import JobStatus

router = APIRouter(prefix="/jobs", tags=["metrics"], responses=problems(404))

POLL_S = 0.5
# Proxies drop connections that stay silent; a comment line every so often keeps a quiet stream open.
KEEPALIVE_S = 15.0
BATCH_ROWS = 5000


@dataclass
class Cursor:
    """Where the stream stands: every row below `step` was sent, and at `step` the names in `sent`.
    Eval metrics share their step with training metrics but may land in SQL later, so a step is never
    assumed complete just because some of its rows went out."""

    step: int
    sent: set[str] = field(default_factory=set)

    def fresh(self, rows: list[Metric]) -> list[Metric]:
        return [row for row in rows if row.step > self.step or row.name not in self.sent]

    def advance(self, rows: list[Metric]) -> None:
        last = rows[-1].step
        names = {row.name for row in rows if row.step == last}
        self.sent = self.sent | names if last == self.step else names
        self.step = last


@dataclass(frozen=True)
class Batch:
    status: JobStatus
    message: str | None
    rows: list[Metric]
    full: bool  # more rows may be waiting right now


def read_batch(job_id: int, name: str | None, cursor: Cursor) -> Batch | None:
    """The status is read before the rows: when it was already terminal, every row the job will ever have
    is in SQL, so an empty remainder means the stream may end. None: the job was deleted, rows and all."""
    with new_session() as session:
        job = session.get(Job, job_id)
        if job is None:
            return None
        query = (
            select(Metric)
            .where(Metric.job_id == job_id, Metric.step >= cursor.step)
            .order_by(Metric.step, Metric.name)
            .limit(BATCH_ROWS)
        )
        if name is not None:
            query = query.where(Metric.name == name)
        rows = list(session.scalars(query))
    return Batch(JobStatus(job.status), job.message, cursor.fresh(rows), len(rows) == BATCH_ROWS)


def sse(event: str, data: str, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {data}\n\n"


async def metric_events(
    job_id: int, name: str | None, after_step: int, is_disconnected: Callable[[], Awaitable[bool]]
) -> AsyncIterator[str]:
    cursor = Cursor(step=after_step + 1)
    quiet_s = 0.0
    while not await is_disconnected():
        # Sessions are synchronous; a thread keeps the event loop free for the other streams.
        batch = await run_in_threadpool(read_batch, job_id, name, cursor)
        if batch is None:
            deleted = StreamEnd(status="deleted", message=f"job {job_id} was deleted")
            yield sse("end", deleted.model_dump_json())
            return
        for row in batch.rows:
            yield sse("metric", MetricPublic.model_validate(row).model_dump_json(), row.step)
        if batch.rows:
            cursor.advance(batch.rows)
            quiet_s = 0.0
        if batch.status.is_terminal and not batch.full:
            yield sse("end", StreamEnd(status=batch.status, message=batch.message).model_dump_json())
            return
        if batch.full:
            continue
        if quiet_s >= KEEPALIVE_S:
            yield ": keepalive\n\n"
            quiet_s = 0.0
        await asyncio.sleep(POLL_S)
        quiet_s += POLL_S


@router.get(
    "/{job_id}/metrics/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
def stream_metrics(
    job: OwnedJob,
    session: SessionDep,
    request: Request,
    name: Annotated[str | None, Query(min_length=1, max_length=64, description="one series")] = None,
    after_step: Annotated[
        int, CanonicalInt, Query(ge=-1, le=DB_INT_MAX, description="only steps after this one")
    ] = -1,
    last_event_id: Annotated[
        int | None, CanonicalInt, Header(ge=-1, le=DB_INT_MAX, description="set by EventSource on reconnect")
    ] = None,
) -> StreamingResponse:
    # The request's session (auth, ownership) would otherwise hold a pooled connection for as long as the
    # stream lasts; each poll opens its own.
    session.close()
    start = max(after_step, last_event_id if last_event_id is not None else -1)
    return StreamingResponse(
        metric_events(job.id, name, start, request.is_disconnected),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )

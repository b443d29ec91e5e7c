"""/metrics for Prometheus (at the root, not under /v1): cluster gauges and the API's request latency."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.auth import get_caller
from app.api.openapi import problems
from app.services.integrations.webhook_attempt import ATTEMPTS as WEBHOOK_ATTEMPTS
from app.services.telemetry import ClusterCollector

router = APIRouter(tags=["metrics"])


def route_template(scope: Scope) -> str:
    """/v1/jobs/7/logs -> /v1/jobs/{job_id}/logs, from the path parameters routing found: what matched is
    known from the scope alone, however routers were nested."""
    if "endpoint" not in scope:
        return "unmatched"
    values = {str(value): f"{{{name}}}" for name, value in scope.get("path_params", {}).items()}
    return "/".join(values.get(segment, segment) for segment in scope["path"].split("/"))


class RequestLatency:
    """Observes the time to the response's first byte: a metrics stream stays open for hours, and that is
    not latency. Routes are labelled by their template (/v1/jobs/{job_id}), never the raw path, so the
    label set stays small."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram
        # Each label set's series, found once: Histogram.labels() checks and locks on every call.
        self._series: dict[tuple[str, str, str], Histogram] = {}

    def _observe(self, labels: tuple[str, str, str], seconds: float) -> None:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = self.histogram.labels(*labels)
        series.observe(seconds)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        observed = False

        def observe(status: int) -> None:
            nonlocal observed
            observed = True
            self._observe((scope["method"], route_template(scope), str(status)), time.perf_counter() - start)

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                observe(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            if not observed:  # the app raised before answering; the server turns that into a 500
                observe(500)


def install_prometheus(app: FastAPI) -> None:
    """A registry per app, so apps built in tests never share (or double-register) a series."""
    registry = CollectorRegistry()
    registry.register(ClusterCollector())
    # Counted by this process's sender (app/services/integrations/webhook_attempt.py).
    registry.register(WEBHOOK_ATTEMPTS)
    latency = Histogram(
        "trainyard_http_request_duration_seconds",
        "API request latency to the first response byte",
        ["method", "route", "status"],
        registry=registry,
    )
    app.state.prometheus_registry = registry
    app.add_middleware(RequestLatency, histogram=latency)
    # Host names and job counts are not for everyone: with auth on, scrapers send a key (bearer_token).
    app.include_router(router, dependencies=[Depends(get_caller)], responses=problems(401))


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def prometheus_metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.prometheus_registry), media_type=CONTENT_TYPE_LATEST)

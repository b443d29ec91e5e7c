"""The ASGI app, served by `python -m app.serve` (uvicorn with the settings' limits). Settings are read on
first request, not at import."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from app.api.errors import install_error_handlers
from app.api.fair_share import GiveBackTurns
from app.api.gate import V1Gate
from app.api.guards import install_request_guards
from app.api.heap import started_heap_frozen
from app.api.openapi import install_openapi, problems
from app.api.routes import (
    checkpoints,
    code,
    compare,
    forecast,
    gpus,
    health,
    jobs,
    keys,
    logs,
    metrics,
    profile,
    queue,
    secrets,
    stacks,
    stream,
    sweeps,
    usage,
    web,
    webhooks,
)
from app.api.routes.prometheus import install_prometheus
from app.api.slow_requests import SlowRequestLog
from app.cpu_pin import keep_to_one_cpu
from app.services.forecasts import forecasting
from app.services.integrations.mlflow_exporter import exporting
from core.config import get_settings
from core.doorbell import EXIT_DRAIN_S, drain_rings

API_PREFIX = "/v1"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The API's own threads while it serves: the webhook sender, the MLflow exporter if configured, and the
    forecaster process; then what the process holds is frozen out of the collector's full passes."""
    if get_settings().api_one_cpu:
        keep_to_one_cpu()  # before the threads below start: they inherit its CPU
    async with webhooks.lifespan(app):
        with exporting(get_settings()), forecasting(get_settings()), started_heap_frozen():
            yield
    # The rings of the last submissions, before the process goes (the reaper would ring for them later).
    await asyncio.to_thread(drain_rings, EXIT_DRAIN_S)


def create_app() -> FastAPI:
    app = FastAPI(
        title="Trainyard",
        summary="Train PyTorch models on the GPUs of one box or many, through a REST API.",
        version="0.1.0",
        # Trainyard exports Prometheus metrics (/metrics) and sets up no OpenTelemetry, so FastAPI's native
        # OpenTelemetry, on by default, would only look for providers on every request and find none.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        lifespan=lifespan,
    )
    # The one body that is not a JSON spec: a code bundle's archive, capped by TRAINYARD_CODE_MAX_BYTES.
    raw_bodies = [("POST", f"{API_PREFIX}{code.router.prefix}")]
    install_error_handlers(app, streamed=raw_bodies)
    v1_dependencies = [Depends(V1Gate(raw_bodies))]
    for module in (
        jobs,
        sweeps,
        metrics,
        stream,
        checkpoints,
        logs,
        gpus,
        queue,
        usage,
        profile,
        stacks,
        keys,
        code,
        compare,
        forecast,
        webhooks,
        secrets,
    ):
        # Auth and the text guard once for every /v1 route, those added later included; a route that needs
        # to know who is asking takes CallerDep, which reads the caller the gate found.
        app.include_router(
            module.router, prefix=API_PREFIX, dependencies=v1_dependencies, responses=problems(401)
        )
    app.include_router(health.router)
    install_prometheus(app)
    app.include_router(web.router)
    install_openapi(app)
    install_request_guards(app, raw_bodies=raw_bodies)
    app.add_middleware(GiveBackTurns)  # the turns V1Gate takes
    app.add_middleware(SlowRequestLog)  # added last: outermost, it times the guards' refusals too
    return app


app = create_app()

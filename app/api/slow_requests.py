"""A warning in the API's log for each request answered slower than TRAINYARD_SLOW_REQUEST_S: its method,
path, status, seconds, and how many requests this process was serving when it came. What a client measures
includes its own side and the network; this says whether the time was spent in the API, and under how much
of its own load (bench/soak reads these lines beside its innocent user's timings)."""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.config import get_settings

log = logging.getLogger("trainyard.slow_requests")


class SlowRequestLog:
    """Outermost: the time runs from the request's arrival in the app to the last byte of its answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        began, ahead, status = time.perf_counter(), self.in_flight, 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.in_flight += 1
        try:
            await self.app(scope, receive, sending)
        finally:
            self.in_flight -= 1
            took = time.perf_counter() - began
            if took > get_settings().slow_request_s:
                log.warning(
                    "slow request: %s %s %s took %.2f s (%d others in flight when it came)",
                    scope["method"],
                    scope["path"],
                    status or "-",
                    took,
                    ahead,
                )

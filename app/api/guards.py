"""Guards against other web pages: DNS rebinding (a Host the server does not answer to) and CSRF (a
state-changing request another site's page made the browser send, which needs no preflight when its body is
a form or text/plain). With auth off (`make run`) nothing else would stop them."""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import problem_response, route_path
from core.config import get_settings

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON = "application/json"


class TrustedHosts:
    """Starlette's TrustedHostMiddleware over TRAINYARD_ALLOWED_HOSTS, built on the first request: settings
    are not read at import."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.hosts: list[str] = []
        self.guard: ASGIApp = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hosts = get_settings().trusted_hosts
        if hosts != self.hosts:
            self.guard = TrustedHostMiddleware(self.app, allowed_hosts=hosts, www_redirect=False)
            self.hosts = hosts
        await self.guard(scope, receive, send)


def cross_site_reason(headers: Headers) -> str | None:
    """Why the browser that sent these headers acts for another site's page; None when it does not. Clients
    that are not browsers send neither header and pass."""
    if headers.get("sec-fetch-site") == "cross-site":
        return "the browser says another site's page sent it (Sec-Fetch-Site: cross-site)"
    origin = headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != headers.get("host"):
        return f"its Origin {origin!r} is not this server's ({headers.get('host')})"
    return None


def _has_body(headers: Headers) -> bool:
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


def _is_json(headers: Headers) -> bool:
    return headers.get("content-type", "").partition(";")[0].strip().lower() == JSON


class CrossSiteGuard:
    """403 for a state-changing request from another site's page; 415 for one whose body is not JSON, as a
    page can send a form or text/plain body without the preflight that would otherwise stop it. The routes in
    `raw_bodies` ((method, path) pairs) take another content type, which they check themselves."""

    def __init__(self, app: ASGIApp, raw_bodies: Collection[tuple[str, str]] = ()) -> None:
        self.app = app
        self.raw_bodies = frozenset(raw_bodies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in STATE_CHANGING:
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        if reason := cross_site_reason(headers):
            detail = (
                f"cross-site {scope['method']} refused: {reason}; call the API from its own dashboard or "
                "from a client that is not a browser (curl, the trainyard CLI)"
            )
            return await problem_response(403, detail, kind="cross-site-request")(scope, receive, send)
        raw = (scope["method"], route_path(scope)) in self.raw_bodies
        if _has_body(headers) and not raw and not _is_json(headers):
            detail = (
                f"Content-Type {headers.get('content-type', '')!r} is not JSON; send the body as JSON with "
                f"Content-Type: {JSON}"
            )
            return await problem_response(415, detail, kind="unsupported-media-type")(scope, receive, send)
        await self.app(scope, receive, send)


def install_request_guards(app: FastAPI, raw_bodies: Collection[tuple[str, str]] = ()) -> None:
    """Outermost, so that nothing runs for a request they refuse."""
    app.add_middleware(CrossSiteGuard, raw_bodies=raw_bodies)
    app.add_middleware(TrustedHosts)

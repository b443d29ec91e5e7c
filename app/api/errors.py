"""Every error leaves as application/problem+json whose detail names the bad field and the fix."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Collection, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.schemas import FieldError, Problem
from app.services.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    CodeInUse,
    CodeNotFound,
    CodeTooLarge,
    DomainError,
    GpuNotFound,
    IdempotencyConflict,
    JobNotFound,
    JobStateConflict,
    KeyNotFound,
    ProfileNotFound,
    ProfileUnreadable,
    QuotaExceeded,
    RunDirStuck,
    SweepEnded,
    SweepNotFound,
    TensorBoardNotFound,
    UnsafeCode,
    WebhookLimitReached,
    WebhookNotFound,
)
from app.services.secrets import SecretLimitReached, SecretNameTaken, SecretNotFound, SharingRefused
from app.services.stacks import StacksNotFound
from core.secrets import SecretsKeyMissing
from core.transitions import InvalidTransition
from jobspec.files import JobFileMissing, JobFileRefused, JobFileTooLarge
from jobspec.problems import SpecError
from jobspec.spec import JobSpec

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
# Retry-After of a 503 for the database: a lock that outlived TRAINYARD_DB_BUSY_TIMEOUT_S, or a database
# server restarting, is not gone at once; a few seconds spaces the clients' retries.
DATABASE_RETRY_AFTER_S = 5

STATUS_OF: dict[type[Exception], int] = {
    JobNotFound: 404,
    CheckpointNotFound: 404,
    ProfileNotFound: 404,
    TensorBoardNotFound: 404,
    CodeNotFound: 404,
    KeyNotFound: 404,
    GpuNotFound: 404,
    WebhookNotFound: 404,
    WebhookLimitReached: 422,
    SweepNotFound: 404,
    SweepEnded: 409,
    CodeInUse: 409,
    CheckpointCorrupt: 409,
    # A job's file the service will not read: a link, a FIFO, a folder (409), or more than its reader takes.
    JobFileMissing: 404,
    JobFileRefused: 409,
    JobFileTooLarge: 413,
    ProfileUnreadable: 422,
    CodeTooLarge: 413,
    UnsafeCode: 422,
    JobStateConflict: 409,
    IdempotencyConflict: 409,
    InvalidTransition: 409,
    QuotaExceeded: 429,
    RunDirStuck: 500,
    StacksNotFound: 404,
    SecretNotFound: 404,
    SecretLimitReached: 422,
    SecretNameTaken: 409,
    SharingRefused: 403,
    SecretsKeyMissing: 503,
}

_SOURCES = ("body", "query", "path", "header", "cookie")


def problem_response(
    status: int, detail: str, *, kind: str | None = None, errors: list[FieldError] | None = None
) -> JSONResponse:
    title = HTTPStatus(status).phrase
    problem = Problem(
        type=f"urn:trainyard:problem:{kind}" if kind else "about:blank",
        title=title,
        status=status,
        detail=detail,
        errors=errors,
    )
    return JSONResponse(
        problem.model_dump(exclude_none=True), status_code=status, media_type="application/problem+json"
    )


def _kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def _allowed_fields(path: Sequence[str]) -> list[str]:
    """Field names of the spec section at `path`, to suggest in place of an unknown one."""
    model: type[BaseModel] = JobSpec
    for part in path:
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def _non_finite(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity")
    return isinstance(value, float) and not math.isfinite(value)


def _field_error(error: dict[str, Any]) -> FieldError:
    loc = [str(part) for part in error["loc"]]
    source, path = (loc[0], loc[1:]) if loc and loc[0] in _SOURCES else ("", loc)
    field = ".".join(path)
    kind = error["type"]
    if kind == "json_invalid":
        return FieldError(field="body", message=f"invalid JSON ({error['ctx']['error']}); send a JSON object")
    if kind == "value_error":
        return FieldError(field=field or source, message=str(error["ctx"]["error"]))
    if kind == "extra_forbidden" and source == "body":
        allowed = ", ".join(_allowed_fields(path[:-1])) or "none"
        return FieldError(field=field, message=f"unknown field; remove it (allowed here: {allowed})")
    if kind == "missing":
        return FieldError(field=field or source, message="is required")
    if _non_finite(error.get("input")):
        return FieldError(field=field, message=f"must be a finite number, got {error['input']}")
    return FieldError(field=field or source, message=error["msg"])


def _detail(errors: list[FieldError]) -> str:
    return "; ".join(f"{e.field}: {e.message}" for e in errors)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [_field_error(dict(error)) for error in exc.errors()]
    return problem_response(422, _detail(errors), kind="validation-error", errors=errors)


async def _spec_error(_request: Request, exc: Exception) -> JSONResponse:
    """Each problem the planner (or a submit-time check) found, under the field it names."""
    assert isinstance(exc, SpecError)
    errors = [FieldError(field=p.field, message=str(p), fix=p.fix or None) for p in exc.problems]
    return problem_response(422, _detail(errors), kind="validation-error", errors=errors)


async def _domain_error(_request: Request, exc: Exception) -> JSONResponse:
    status = next(code for kind, code in STATUS_OF.items() if isinstance(exc, kind))
    field = exc.field if isinstance(exc, DomainError) else None
    errors = [FieldError(field=field, message=str(exc))] if field else None
    response = problem_response(
        status, _detail(errors) if errors else str(exc), kind=_kebab(type(exc).__name__), errors=errors
    )
    if isinstance(exc, QuotaExceeded):
        response.headers["Retry-After"] = str(exc.retry_after_s)
    return response


async def _database_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    """503 for a database that did not take the request: locked past the busy timeout, or unreachable. The
    driver's words stay in the server's log, as they may name its host."""
    log.warning("database unavailable: %s", exc)
    response = problem_response(
        503,
        f"the database is busy or unreachable ({type(exc).__name__}); try again in {DATABASE_RETRY_AFTER_S} "
        "s: a submission sent with an Idempotency-Key is safe to repeat, it never makes a second job",
        kind="database-unavailable",
    )
    response.headers["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
    return response


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    detail = str(exc.detail)
    if exc.status_code == 404 and detail == HTTPStatus.NOT_FOUND.phrase:
        detail = f"no route {request.method} {request.url.path}; the API is described at /docs"
    response = problem_response(exc.status_code, detail)
    response.headers.update(exc.headers or {})
    return response


def route_path(scope: Scope) -> str:
    """The path the app's routes match: behind a proxy's prefix (root_path) the server may include it."""
    return str(scope["path"]).removeprefix(scope.get("root_path", ""))


class BodySizeLimit:
    """413 for request bodies over `max_bytes`, declared by Content-Length or streamed in chunks. The routes
    in `streamed` ((method, path) pairs) take bodies of another kind, which they cap themselves."""

    def __init__(self, app: ASGIApp, max_bytes: int, streamed: Collection[tuple[str, str]] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.streamed = frozenset(streamed)
        self.detail = f"request body exceeds {max_bytes} bytes; send a smaller spec"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], route_path(scope)) in self.streamed:
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await problem_response(413, self.detail)(scope, receive, send)
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                # FastAPI re-raises an HTTPException met while reading the body, so _http_error answers.
                raise HTTPException(413, self.detail)
            return message

        await self.app(scope, limited_receive, send)


def install_error_handlers(app: FastAPI, streamed: Collection[tuple[str, str]] = ()) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(SpecError, _spec_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(OperationalError, _database_unavailable)
    for kind in STATUS_OF:
        app.add_exception_handler(kind, _domain_error)
    app.add_middleware(BodySizeLimit, max_bytes=MAX_BODY_BYTES, streamed=streamed)

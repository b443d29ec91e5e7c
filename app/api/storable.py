"""Refuse JSON text that a database cannot store: PostgreSQL's text and JSON columns cannot hold NUL, and a
lone surrogate (`"\\ud800"` in JSON) cannot be encoded as UTF-8 on either database. One check for every
route: app/main.py makes it a dependency of every /v1 router, so a route added later has it too."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from fastapi import Request
from fastapi.exceptions import RequestValidationError

from app.api.errors import route_path
from app.api.guards import STATE_CHANGING


def _problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (\\u0000); remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate, which is not valid Unicode; send valid UTF-8 text"
    return None


def _unstorable(value: object, loc: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(location, message) of each bad string in a parsed JSON value; a bad key is blamed on its object."""
    if isinstance(value, str):
        if message := _problem(value):
            yield loc, message
    elif isinstance(value, dict):
        for key, item in value.items():
            if message := _problem(key):
                yield loc, f"key {key!r} {message}"
            else:
                yield from _unstorable(item, (*loc, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unstorable(item, (*loc, index))


class RefuseUnstorableText:
    """A dependency that walks a state-changing request's JSON body before the route validates or stores it,
    so a bad string is a 422 naming its field, never a 500 from the database or a row PostgreSQL would refuse.
    Every JSON body is walked, stored or not: the rule is one, whatever the route. The routes in `raw_bodies`
    ((method, path) pairs) take an archive, streamed and capped by the route: reading it here would buffer it
    whole."""

    def __init__(self, raw_bodies: Collection[tuple[str, str]] = ()) -> None:
        self.raw_bodies = frozenset(raw_bodies)

    async def __call__(self, request: Request) -> None:
        method = request.method
        if method not in STATE_CHANGING or (method, route_path(request.scope)) in self.raw_bodies:
            return
        # JSON text can carry a NUL or a lone surrogate only as a \u escape (a raw control character or
        # invalid UTF-8 is refused by the parser), so a body of UTF-8 without one needs no walk. A body in
        # UTF-16 or UTF-32, which json reads too, has NUL bytes: it is walked.
        raw = await request.body()
        if b"\\u" not in raw and b"\x00" not in raw:
            return
        try:
            # FastAPI has already parsed the body of a route that takes one, and Starlette keeps it: not
            # parsed twice. Any other body is under BodySizeLimit's cap.
            body = await request.json()
        except (ValueError, UnicodeDecodeError):  # no body, or not JSON: the route answers as it would
            return
        errors = [
            {
                "type": "value_error",
                "loc": ("body", *loc),
                "msg": message,
                "input": None,
                "ctx": {"error": message},
            }
            for loc, message in _unstorable(body, ())
        ]
        if errors:
            raise RequestValidationError(errors)

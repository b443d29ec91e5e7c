"""Refuse JSON text that a database cannot store: PostgreSQL's text and JSON columns cannot hold NUL, and a
lone surrogate (`"\\ud800"` in JSON) cannot be encoded as UTF-8 on either database."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Request
from fastapi.exceptions import RequestValidationError


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


async def refuse_unstorable_text(request: Request) -> None:
    """A dependency of routes that store their JSON body: runs before the body is validated, so a bad
    string is a 422 naming its field, never a 500 from the database. Bodies not JSON: the route's."""
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
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

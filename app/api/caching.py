"""HTTP's own caching for a body clients poll: a strong ETag of the body, and 304 when the client has it.

`Cache-Control: no-cache` lets a client (a browser's fetch included) keep the body but makes it ask each time
with `If-None-Match`; the answer is then a 304 with no body whenever nothing in it changed.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

from fastapi import Header, Response, status
from pydantic import BaseModel

JSON = "application/json"

IfNoneMatch = Annotated[
    str | None, Header(description="the ETag of the body the client has: 304 while it is still current")
]
# What a revalidated 200 carries besides its body, as `responses={200: {"headers": CACHE_HEADERS}}`.
CACHE_HEADERS: dict[str, Any] = {
    "ETag": {"description": "names this body; send it back as If-None-Match", "schema": {"type": "string"}},
    "Cache-Control": {"description": "no-cache: keep the body, revalidate it", "schema": {"type": "string"}},
}


def revalidated(what: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of a route answered by revalidated_json: its 200's headers, and its 304 for
    `what` ("the job")."""
    description = f"the client's copy (its If-None-Match) is still {what} as it is"
    return {200: {"headers": CACHE_HEADERS}, 304: {"description": description}}


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def is_current(if_none_match: str, etag: str) -> bool:
    """Whether the client's copy is `etag`'s body. If-None-Match lists tags or is `*`, and compares them
    weakly (RFC 9110, 13.1.2): W/"x" names the same body as "x"."""
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return etag in tags or "*" in tags


def revalidated_json(model: BaseModel, if_none_match: str | None) -> Response:
    """`model` as JSON with its ETag, or 304 with no body when the client already has exactly that."""
    body = model.model_dump_json().encode()
    headers = {"ETag": etag_of(body), "Cache-Control": "no-cache"}
    if if_none_match is not None and is_current(if_none_match, headers["ETag"]):
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    return Response(body, media_type=JSON, headers=headers)

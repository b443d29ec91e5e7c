"""uvicorn's httptools protocol with a bound on a request's head (TRAINYARD_MAX_HEADER_BYTES).

httptools parses a request in C, where h11 parses it in Python: on uvicorn, h11 costs the API a sixth of a
job's GET more CPU per request (bench/RESULTS.md, "The HTTP parser"). But httptools keeps
whatever head a client sends until its blank line, of any size, and h11's bound on an unfinished head is
what stopped a client from growing one without end (docs/reliability.md, issue 22). This protocol keeps
httptools and adds the bound: it counts the bytes that arrive while a request's head is unfinished, and a
head past the setting is answered 431 and its connection closed, before the head ends.

The count is of whole reads: the read that ends one request may carry the start of the next, which is not
counted, so a head may pass the bound by up to one read (the transport's buffer) before it is refused. Only
asyncio's Protocol methods and httptools' parser callbacks are overridden, each calling uvicorn's own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from core.config import get_settings


def _refusal(limit: int) -> bytes:
    message = f"The request's line and headers pass {limit} bytes (TRAINYARD_MAX_HEADER_BYTES).".encode()
    head = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: text/plain; charset=utf-8\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n" % len(message)
    )
    return head + message


class HeadBoundHttpTools(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_limit = get_settings().max_header_bytes
        self._head_bytes = 0
        self._in_head = True  # a connection begins with a head
        self._connection: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._connection = transport
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # Still in the same head after the parser took the read (a head that ended reset the count).
        unfinished = self._in_head and self._head_bytes > self._head_limit
        if unfinished and self._connection is not None and not self._connection.is_closing():
            self._connection.write(_refusal(self._head_limit))
            self._connection.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True

"""A lean HTTP/1.1 keep-alive client for bench.api_load: one connection per simulated client, real sockets.

httpx costs about 1.1 ms of CPU per request on the 2-core dev machine, so 64 closed-loop httpx clients sharing
those cores with the server queue for ~70 ms whatever the server does. This client writes a request already
encoded as bytes and reads the answer by its Content-Length with asyncio streams (on uvloop): the work any
HTTP/1.1 client must do, and little else. It speaks only what the benchmark needs: no redirects, no chunked
bodies, no TLS; an answer it cannot read raises ProtocolError, which the benchmark counts as a failure.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from dataclasses import dataclass
from urllib.parse import urlsplit

HEAD_END = b"\r\n\r\n"


class ProtocolError(Exception):
    """An answer this client cannot read as one HTTP/1.1 response with a Content-Length."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes


def encode_request(method: str, path: str, host: str, body: bytes = b"", content_type: str = "") -> bytes:
    """The request's bytes, built once per distinct request rather than once per send."""
    lines = [f"{method} {path} HTTP/1.1", f"host: {host}"]
    if body or method in ("POST", "PUT", "PATCH"):
        lines += [f"content-type: {content_type}", f"content-length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body


def parse_head(head: bytes) -> tuple[int, int]:
    """(status, content length) from a response's status line and headers, `head` ending in CRLF CRLF."""
    status_line, _, header_block = head.partition(b"\r\n")
    version, _, rest = status_line.partition(b" ")
    if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    length = None
    for line in header_block.split(b"\r\n"):
        raw_name, _, value = line.partition(b":")
        name = raw_name.strip().lower()
        if name == b"content-length" and value.strip().isdigit():
            length = int(value)
        elif name == b"transfer-encoding":
            raise ProtocolError(
                "a chunked (or otherwise encoded) body; this client reads Content-Length only"
            )
    if length is None:
        raise ProtocolError("the response has no Content-Length")
    return int(rest[:3]), length


class Connection:
    """One keep-alive connection; one request in flight at a time, as a closed-loop client has."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, url: str) -> Connection:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"{url}: give http://host:port")
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        return cls(reader, writer, parts.netloc)

    async def send(self, request: bytes) -> Reply:
        """Send an encoded request (encode_request) and read its whole response."""
        self.writer.write(request)
        try:
            head = await self.reader.readuntil(HEAD_END)
            status, length = parse_head(head)
            return Reply(status, await self.reader.readexactly(length))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise ProtocolError(f"the connection ended or sent a head too long to read: {exc}") from exc

    async def request(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> Reply:
        return await self.send(encode_request(method, path, self.host, body, content_type))

    async def close(self) -> None:
        self.writer.close()
        # The server may have closed first; nothing is left to read either way.
        with suppress(OSError):
            await self.writer.wait_closed()

"""bench.lean_http, the load client of bench.api_load: what it sends, what it reads, what it refuses."""

from __future__ import annotations

import asyncio

import pytest

from bench.lean_http import Connection, ProtocolError, encode_request, parse_head


def test_requests_carry_a_length_only_with_a_body() -> None:
    assert encode_request("GET", "/v1/jobs/3", "h:1") == b"GET /v1/jobs/3 HTTP/1.1\r\nhost: h:1\r\n\r\n"
    post = encode_request("POST", "/v1/jobs", "h:1", b'{"a": 1}', "application/json")
    assert post.endswith(b'content-type: application/json\r\ncontent-length: 8\r\n\r\n{"a": 1}')


def test_heads_give_the_status_and_length_whatever_the_header_case() -> None:
    assert parse_head(b"HTTP/1.1 201 Created\r\nContent-Length: 12\r\nx: y\r\n\r\n") == (201, 12)
    assert parse_head(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n") == (404, 0)


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx: y\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
    ],
)
def test_answers_it_cannot_read_are_errors_not_results(head: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_head(head)


def test_one_connection_carries_requests_one_after_another() -> None:
    """Over a real loopback socket: keep-alive, and a server that hangs up mid-answer is an error."""
    bodies = [b'{"id": 1}', b'{"id": 22}']

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for body in bodies:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\ncut short")
        writer.close()

    async def scenario() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = await Connection.open(f"http://127.0.0.1:{port}")
        try:
            for body in bodies:
                reply = await connection.request("GET", "/")
                assert (reply.status, reply.body) == (200, body)
            with pytest.raises(ProtocolError):
                await connection.request("GET", "/")
        finally:
            await connection.close()
            server.close()

    asyncio.run(scenario())

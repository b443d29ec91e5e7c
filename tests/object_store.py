"""An object store for tests: moto's S3 server on loopback with a bucket, a folder uploaded into it, and a
proxy before it that answers 503 to a number of requests on demand (a storm), forwarding all others."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from tests.integration.servers import free_port

BUCKET = "datasets"
KEYS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}


@dataclass
class Store:
    endpoint: str  # moto's own

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEYS["access_key_id"],
            aws_secret_access_key=KEYS["secret_access_key"],
            region_name=KEYS["region"],
        )

    def upload(self, folder: Path, prefix: str) -> str:
        """Every file under `folder` at <prefix>/<its path>; returns the s3:// root of them."""
        client = self.client()
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(folder).as_posix()}")
        return f"s3://{BUCKET}/{prefix}"


def credentials(endpoint: str) -> str:
    """A data.credentials secret's value for the store at `endpoint`."""
    return json.dumps({**KEYS, "endpoint_url": endpoint})


@contextmanager
def moto_store() -> Iterator[Store]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        store = Store(f"http://127.0.0.1:{port}")
        store.client().create_bucket(Bucket=BUCKET)
        yield store
    finally:
        server.stop()


@dataclass
class Storm:
    """How many of the next requests are answered 503, and how many were, and how long each request is held
    before it is forwarded (a slow store): shared with the handler threads."""

    left: int = 0
    delay_s: float = 0.0
    answered_503: int = 0
    forwarded: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> bool:
        with self.lock:
            if self.left > 0:
                self.left -= 1
                self.answered_503 += 1
                return True
            self.forwarded += 1
            return False


def _handler(upstream: tuple[str, int], storm: Storm) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            time.sleep(storm.delay_s)
            if storm.take():
                said = b"<Error><Code>ServiceUnavailable</Code><Message>storm</Message></Error>"
                self.send_response(503)
                self.send_header("Content-Length", str(len(said)))
                self.end_headers()
                self.wfile.write(said)
                return
            connection = http.client.HTTPConnection(*upstream, timeout=30)
            connection.request(self.command, self.path, body, dict(self.headers.items()))
            answer = connection.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            connection.close()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: the tests read the storm's counts

    return Forward


@contextmanager
def storm_proxy(endpoint: str) -> Iterator[tuple[str, Storm]]:
    """A proxy to `endpoint` (http://host:port) and the Storm that makes it answer 503."""
    host, port = endpoint.removeprefix("http://").split(":")
    storm = Storm()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler((host, int(port)), storm))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", storm
    finally:
        server.shutdown()
        server.server_close()

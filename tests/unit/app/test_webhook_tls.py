"""An https destination is verified against the CA bundle, which the sender loads once per process rather
than once per delivery (app/services/integrations/webhook_attempt.py): a receiver whose certificate no CA
signed gets no delivery, every time."""

from __future__ import annotations

import asyncio
import datetime
import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.services.integrations.webhook_attempt import Request, post
from core.config import Settings


def self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert, private = folder / "cert.pem", folder / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert, private


@pytest.fixture
def https_receiver(tmp_path: Path) -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(*self_signed(tmp_path))
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()


def test_a_receiver_no_ca_signed_gets_no_delivery_however_many_are_sent(
    https_receiver: tuple[str, list[bytes]],
) -> None:
    url, received = https_receiver
    settings = Settings(webhook_allow="127.0.0.1")
    for _ in range(2):  # the second through the context the first loaded
        answer = asyncio.run(post(Request(url, b"{}", {}), settings))
        assert answer.code is None and "CERTIFICATE_VERIFY_FAILED" in answer.text, answer
    assert received == []

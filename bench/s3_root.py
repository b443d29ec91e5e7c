"""bench.streaming --s3: the bench's folder uploaded to moto's S3 server, started on loopback in the bench's
own process, and the credentials its trainer reads it with (TRAINYARD_DATA_CREDENTIALS, as the worker hands
a data.credentials secret to the ranks). moto is a test dependency: without it --s3 says so and stops.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from jobspec.data_store import CREDENTIALS_ENV, StoreCredentials, store_client

BUCKET = "bench"
KEYS = StoreCredentials(access_key_id="bench", secret_access_key="bench", region="us-east-1")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _upload(folder: Path, prefix: str, keys: StoreCredentials) -> None:
    client = store_client(keys)
    files = [path for path in sorted(folder.rglob("*")) if path.is_file()]
    with ThreadPoolExecutor(16) as pool:  # boto3's clients are safe to share between threads
        list(
            pool.map(
                lambda path: client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(folder)}"),
                files,
            )
        )


@contextmanager
def s3_root(folder: Path) -> Iterator[str]:
    """`folder` in a local S3 server, as an s3:// data.root; the credentials set in this process's
    environment, which the bench's trainers inherit."""
    if importlib.util.find_spec("moto") is None:
        raise SystemExit("--s3 starts moto's S3 server: install it (pip install 'moto[server]')")
    from moto.server import ThreadedMotoServer

    # werkzeug's line per request, on this process's stderr under the GIL the server's threads share: one per
    # image read, thousands a second.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    keys = KEYS.model_copy(update={"endpoint_url": f"http://127.0.0.1:{port}"})
    try:
        store_client(keys).create_bucket(Bucket=BUCKET)
        _upload(folder, folder.name, keys)
        os.environ[CREDENTIALS_ENV] = json.dumps(keys.model_dump(exclude_none=True))
        yield f"s3://{BUCKET}/{folder.name}"
    finally:
        os.environ.pop(CREDENTIALS_ENV, None)
        server.stop()

"""The object store that holds checkpoints and logs when the API cannot see a worker's runs directory
(artifact_store=s3): an S3-compatible bucket reached through boto3.

Keys mirror the run directory: runs/<job>/<path> is stored at <s3_prefix>/<job>/<path>. `run_key` and
`run_path` are that one rule, each way round, so a file a worker wrote and the object the API reads always
name each other.

An object cannot be appended to, so a file that grows (a log) is stored as parts under <key>.parts/, each
named by the byte offset where it ends: `part_key` is how the worker names them, `read_parts` how the API
reads a byte range back across them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from core.config import ArtifactStore, Settings

URI_SCHEME = "s3://"
STREAM_CHUNK_BYTES = 1 << 20
DELETE_BATCH = 1000  # the most keys one DeleteObjects request takes
PARTS = ".parts"
# Zero-padded so that S3's listing order (by key) is the order of the bytes.
PART_DIGITS = 20
# HEAD answers a missing key with a bare 404; GET with NoSuchKey; a range past the end with InvalidRange.
MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


def is_object_uri(path: str) -> bool:
    return path.startswith(URI_SCHEME)


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@dataclass(frozen=True)
class StoredObject:
    """An object opened for reading: its size up front (a Content-Length) and its bytes as they arrive."""

    name: str
    size: int
    chunks: Iterator[bytes]


@dataclass(frozen=True)
class ObjectStore:
    client: Any  # boto3's S3 client, which has no static types
    bucket: str
    prefix: str

    def run_key(self, job_id: int, relative: str) -> str:
        return f"{self.prefix}/{job_id}/{relative}"

    def run_path(self, key: str) -> PurePosixPath:
        """Where `key`'s file lies relative to a runs directory: <job>/<path in its run directory>."""
        return PurePosixPath(key.removeprefix(f"{self.prefix}/"))

    def uri(self, key: str) -> str:
        return f"{URI_SCHEME}{self.bucket}/{key}"

    def key_of(self, uri: str) -> str | None:
        """The key of a URI inside this store's bucket and prefix; None for any other URI."""
        bucket, _, key = uri.removeprefix(URI_SCHEME).partition("/")
        inside = is_object_uri(uri) and bucket == self.bucket and key.startswith(f"{self.prefix}/")
        return key if inside else None

    def code_key(self, digest: str) -> str:
        """A code bundle's archive; `code` is no job id, so it never meets a run's keys."""
        return f"{self.prefix}/code/{digest}"

    def part_key(self, key: str, end: int) -> str:
        """The part of `key`'s file that ends at byte `end` (and begins where the previous part ended)."""
        return f"{key}{PARTS}/{end:0{PART_DIGITS}d}"

    def put_file(
        self,
        path: Path,
        key: str,
        metadata: dict[str, str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """`progress` is called with each chunk's bytes as it is sent; what it raises aborts the upload."""
        extra = {"Metadata": metadata or {}}
        self.client.upload_file(str(path), self.bucket, key, ExtraArgs=extra, Callback=progress)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def metadata(self, key: str) -> dict[str, str] | None:
        """The user metadata of an existing object; None when there is no such object."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in MISSING_CODES:
                return None
            raise
        return dict(head.get("Metadata", {}))

    def exists(self, key: str) -> bool:
        return self.metadata(key) is not None

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset`; empty when the object is missing or ends before `offset`."""
        byte_range = f"bytes={offset}-{offset + length - 1}"
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key, Range=byte_range)
        except ClientError as exc:
            if _error_code(exc) in MISSING_CODES | {"InvalidRange"}:
                return b""
            raise
        data: bytes = response["Body"].read()
        return data

    def read_parts(self, key: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset` of a file stored as parts; short where a part is not there yet.

        Listing from the first part ending past `offset` skips the parts before it however many there are;
        a part may overlap the one before (a worker that sends a file again from its start), as its bytes
        are the same."""
        folder = f"{key}{PARTS}/"
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=folder, StartAfter=self.part_key(key, offset)
        )
        data, position, stop = bytearray(), offset, offset + length
        for page in pages:
            for part in page.get("Contents", []):
                end = int(part["Key"].removeprefix(folder))
                start = end - int(part["Size"])
                if start > position:  # a gap: the part before is still being uploaded
                    return bytes(data)
                upto = min(end, stop)
                data += self.read_range(part["Key"], position - start, upto - position)
                position = upto
                if position == stop:
                    return bytes(data)
        return bytes(data)

    def open(self, key: str) -> StoredObject | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in MISSING_CODES:
                return None
            raise
        body = response["Body"]

        def chunks() -> Iterator[bytes]:
            # Closed however the reader stops, a client that hangs up mid-download included.
            try:
                yield from body.iter_chunks(STREAM_CHUNK_BYTES)
            finally:
                body.close()

        return StoredObject(PurePosixPath(key).name, int(response["ContentLength"]), chunks())

    def download_to(self, key: str, file: BinaryIO) -> None:
        """Into an open file: the caller chose where, and how it was opened."""
        self.client.download_fileobj(self.bucket, key, file)

    def download(self, key: str, path: Path) -> None:
        """Into a side file renamed at the end, so `path` never holds half an object."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        self.client.download_file(self.bucket, key, str(partial))
        partial.replace(path)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)  # deleting a missing key succeeds

    def delete_run(self, job_id: int) -> None:
        self._delete_under(self.run_key(job_id, ""))

    def delete_parts(self, key: str) -> None:
        self._delete_under(f"{key}{PARTS}/")

    def _delete_under(self, prefix: str) -> None:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
        for start in range(0, len(keys), DELETE_BATCH):
            batch = [{"Key": key} for key in keys[start : start + DELETE_BATCH]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


@lru_cache
def _client(endpoint_url: str | None) -> Any:
    # A session of its own: boto3's default session is not safe to build clients from in several threads.
    # Credentials and region come from the standard AWS_* variables (or ~/.aws), as with any AWS tool.
    addressing = {"addressing_style": "path"} if endpoint_url else {}
    config = Config(retries={"mode": "standard"}, s3=addressing)
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)


def object_store(settings: Settings) -> ObjectStore | None:
    """The store, or None when runs_dir is shared (artifact_store=shared) and files are read in place."""
    if settings.artifact_store is not ArtifactStore.S3 or settings.s3_bucket is None:
        return None
    return ObjectStore(_client(settings.s3_endpoint_url), settings.s3_bucket, settings.s3_prefix)


def locate(settings: Settings, uri: str) -> tuple[ObjectStore, str] | None:
    """The store and key of a URI in this deployment's bucket and prefix; None for anything else: a local
    path, another bucket, or any URI when the store is off."""
    store = object_store(settings)
    key = store.key_of(uri) if store is not None else None
    return None if store is None or key is None else (store, key)

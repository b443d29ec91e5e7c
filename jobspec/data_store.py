"""Datasets in an object store: data.root "s3://bucket/prefix" for shards, tokens and image_folder, the
credentials that open it, and a bounded listing of what lies under it.

The API lists a root when it plans a job (objects, bytes: never more than it is told to, nor for longer);
the ranks list it again when they load and read it by ranged GETs (trainers/data/files.py). Both build their
client here, with botocore's own retries. No torch.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobspec.catalog.datasets import DatasetName

SCHEME = "s3://"
# The ranks read the credentials from here: the worker puts them in the ranks' environment alone.
CREDENTIALS_ENV = "TRAINYARD_DATA_CREDENTIALS"
STORED_DATASETS = frozenset({DatasetName.SHARDS, DatasetName.TOKENS, DatasetName.IMAGE_FOLDER})
# S3's own bucket naming rule (3-63 lower-case letters, digits, dots and hyphens).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# botocore's standard mode retries 5xx answers, throttling and dropped connections with jittered exponential
# backoff (capped at 20 s each); ten attempts ride out a storm of about a minute.
RETRY_ATTEMPTS = 10
LIST_PAGE = 1000  # the most keys ListObjectsV2 answers at once


def is_store_root(root: str | None) -> bool:
    return root is not None and root.startswith(SCHEME)


@dataclass(frozen=True)
class StoreRoot:
    bucket: str
    prefix: str  # "" or ending in "/": keys under it are the dataset's

    def uri(self, key: str = "") -> str:
        return f"{SCHEME}{self.bucket}/{key or self.prefix}"

    def relative(self, key: str) -> str:
        return key.removeprefix(self.prefix)


def parse_store_root(root: str) -> StoreRoot:
    """The bucket and prefix of 's3://bucket/prefix'; ValueError naming data.root and the form."""
    bucket, _, prefix = root.removeprefix(SCHEME).partition("/")
    parts = prefix.rstrip("/").split("/") if prefix.strip("/") else []
    if not _BUCKET.fullmatch(bucket) or any(part in ("", ".", "..") for part in parts):
        raise ValueError(
            f"data.root {root!r} is no object store folder; write it as s3://bucket/prefix (a bucket name of "
            "3-63 lower-case letters, digits, '.' and '-', and a prefix without empty, '.' or '..' parts)"
        )
    return StoreRoot(bucket, "".join(f"{part}/" for part in parts))


class StoreCredentials(BaseModel):
    """What a data.credentials secret holds, as a JSON object."""

    model_config = ConfigDict(extra="forbid")

    access_key_id: str = Field(min_length=1, max_length=256)
    secret_access_key: str = Field(min_length=1, max_length=256)
    session_token: str | None = Field(None, max_length=4096)
    endpoint_url: str | None = Field(None, max_length=1024, pattern=r"^https?://")
    region: str | None = Field(None, max_length=64)


def _refused(wrong: str) -> ValueError:
    return ValueError(
        "data.credentials: the secret is not a JSON object of access_key_id, secret_access_key and "
        f"optionally session_token, endpoint_url, region ({wrong}); set it again with `trainyard secret set "
        "NAME`"
    )


def parse_credentials(value: str) -> StoreCredentials:
    """The secret's value; a message names the keys that are wrong, never the value."""
    try:
        given = json.loads(value)
    except ValueError:
        raise _refused("it is not JSON") from None
    try:
        return StoreCredentials.model_validate(given)
    except ValidationError as exc:
        wrong = sorted({".".join(map(str, error["loc"])) or "the whole value" for error in exc.errors()})
        raise _refused(f"wrong: {', '.join(wrong)}") from None


def store_client(
    credentials: StoreCredentials | None, timeout_s: float = 30.0, attempts: int = RETRY_ATTEMPTS
) -> Any:
    """An S3 client with botocore's retries; without credentials, boto3's own chain (AWS_* variables, the
    instance's role). A session of its own: boto3's default one is not safe across threads."""
    import boto3
    from botocore.config import Config

    endpoint = credentials.endpoint_url if credentials else None
    config = Config(
        retries={"mode": "standard", "max_attempts": attempts},
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        # Path-style keys for S3-compatible servers (MinIO, Ceph, moto), which seldom serve bucket domains.
        s3={"addressing_style": "path"} if endpoint else {},
    )
    if credentials is None:
        session = boto3.session.Session()
    else:
        session = boto3.session.Session(
            aws_access_key_id=credentials.access_key_id,
            aws_secret_access_key=credentials.secret_access_key,
            aws_session_token=credentials.session_token,
            region_name=credentials.region,
        )
    return session.client("s3", endpoint_url=endpoint, config=config)


def credentials_from_env() -> StoreCredentials | None:
    value = os.environ.get(CREDENTIALS_ENV)
    return None if not value else parse_credentials(value)


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    etag: str  # reads ask for this version: a dataset rewritten mid-job fails it rather than mixing


class StoreListing(BaseModel):
    """What a dry run found under an object store root."""

    root: str
    objects: int
    bytes: int
    complete: bool = Field(description="false: more lie under the root than were listed (bounded listing)")


def iter_objects(client: Any, root: StoreRoot, delimiter: bool = False) -> Iterator[StoredObject]:
    """Every object under the root in key order, a page of ListObjectsV2 at a time; `delimiter`: only those
    directly under it."""
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=root.bucket,
        Prefix=root.prefix,
        PaginationConfig={"PageSize": LIST_PAGE},
        **({"Delimiter": "/"} if delimiter else {}),
    )
    for page in pages:
        for item in page.get("Contents", []):
            yield StoredObject(item["Key"], int(item["Size"]), str(item.get("ETag", "")))


def bounded_listing(client: Any, root: StoreRoot, max_objects: int, timeout_s: float) -> StoreListing:
    """At most max_objects, for at most about timeout_s: a prefix a user names may hold billions."""
    deadline = time.monotonic() + timeout_s
    objects = size = 0
    complete = True
    for found in iter_objects(client, root):
        if objects == max_objects or time.monotonic() > deadline:
            complete = False
            break
        objects, size = objects + 1, size + found.size
    return StoreListing(root=root.uri(), objects=objects, bytes=size, complete=complete)

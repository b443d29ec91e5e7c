"""Where a dataset's files are read from: the data dir (LocalFiles) or an object store (StoreFiles), behind
one small interface, so that shards, tokens and image_folder read either the same way.

An object store is read by ranged GETs, each cached on the host (trainers/data/byte_cache.py), in blocks of
many samples when what the job reads fits that cache (StoreFiles.expect), and pinned to the version the
listing saw (If-Match: a dataset rewritten under a running job fails it, rather than feeding it a mix).
botocore retries what fails before an answer's body (5xx, throttling, refused connections); what fails while
the body streams in is retried here, as botocore leaves that to its caller.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from jobspec.data_store import (
    RETRY_ATTEMPTS,
    StoredObject,
    StoreRoot,
    credentials_from_env,
    iter_objects,
    store_client,
)
from jobspec.datadir import run_dir_from_env, shown_data_path
from trainers.data.byte_cache import ByteCache

CACHE_FOLDER = "data-cache"  # in the run directory, so that the job's disk limit counts it
# What a tar's index reads at once: its members' headers, between their data.
INDEX_READ_BYTES = 1 << 20
# What a ranged read fetches when the job's objects fit its cache: many samples a GET.
BLOCK_BYTES = 8 << 20


class Files(Protocol):
    """A dataset's files by name: a path under the data dir, or a key in the store."""

    def read(self, name: str, offset: int = 0, length: int | None = None, version: str = "") -> bytes:
        """`length` bytes from `offset` (None: to the end); `version` pins a stored object's ETag."""
        ...

    def open(self, name: str, size: int, version: str = "") -> BinaryIO:
        """A seekable reader of the whole file, for tarfile."""
        ...

    def shown(self, name: str) -> str:
        """The file as messages show it."""
        ...


class LocalFiles:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def read(self, name: str, offset: int = 0, length: int | None = None, version: str = "") -> bytes:
        with open(name, "rb") as file:
            file.seek(offset)
            return file.read(-1 if length is None else length)

    def open(self, name: str, size: int, version: str = "") -> BinaryIO:
        return open(name, "rb")

    def shown(self, name: str) -> str:
        return shown_data_path(self.data_dir, Path(name))


class _Ranged(io.RawIOBase):
    """An object as a seekable raw file, each read one ranged GET (BufferedReader groups them)."""

    def __init__(self, files: StoreFiles, key: str, size: int, version: str) -> None:
        self.files, self.key, self.size, self.version = files, key, size, version
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: Any) -> int:
        length = min(len(buffer), self.size - self.position)
        if length <= 0:
            return 0
        data = self.files.read(self.key, self.position, length, self.version)
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


class StoreFiles:
    """Objects under an object store root. Picklable for loader workers: each process makes its own client
    (boto3's are not safe across a fork)."""

    def __init__(self, root: StoreRoot, cache: ByteCache | None) -> None:
        self.root = root
        self.cache = cache
        self.block_bytes = 0  # 0: each read fetches its own range (expect)
        self._client: Any = None
        self._pid = 0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_pid": 0}

    def client(self) -> Any:
        if self._pid != os.getpid():
            self._client, self._pid = store_client(credentials_from_env()), os.getpid()
        return self._client

    def listing(self, delimiter: bool = False) -> list[StoredObject]:
        return list(iter_objects(self.client(), self.root, delimiter))

    def expect(self, total_bytes: int) -> None:
        """The job will read `total_bytes` of these objects. When they fit the cache, ranged reads fetch
        whole blocks of BLOCK_BYTES, each once per host and kept: a shard's samples, or a token file's
        windows, in any order cost a GET per block rather than one each. What does not fit is read range
        by range, as a block would be evicted before its other samples were read."""
        cache = self.cache
        blocks = cache is not None and cache.keeps_all(total_bytes) and cache.holds(BLOCK_BYTES)
        self.block_bytes = BLOCK_BYTES if blocks else 0

    def read(self, name: str, offset: int = 0, length: int | None = None, version: str = "") -> bytes:
        if length is None or not self.block_bytes:
            return self._cached(name, offset, length, version)
        block = self.block_bytes
        parts = []
        for start in range(offset - offset % block, offset + length, block):
            low, high = max(offset, start), min(offset + length, start + block)
            parts.append(self._in_block(name, start, version, low - start, high - low))
        return b"".join(parts)

    def _in_block(self, name: str, start: int, version: str, offset: int, length: int) -> bytes:
        """`length` bytes at `offset` in the block at `start`, read from the cache, or by the one process
        that fetches the block while the others wait for it."""
        assert self.cache is not None  # blocks are read only with a cache (expect)
        cached_as = self._cached_as(name, version, start, start + self.block_bytes - 1)
        data = self.cache.get(cached_as, offset, length)
        if data is None:
            with self.cache.filling(cached_as):
                data = self.cache.get(cached_as, offset, length)
                if data is None:
                    whole = self._get(name, f"bytes={start}-{start + self.block_bytes - 1}", version)
                    self.cache.put(cached_as, whole)
                    data = whole[offset : offset + length]
        return data

    def _cached_as(self, name: str, version: str, start: int, end: int | str) -> str:
        return f"{self.root.bucket}/{name}@{version}:{start}-{end}"

    def _cached(self, name: str, offset: int, length: int | None, version: str) -> bytes:
        end = "" if length is None else offset + length - 1
        cached_as = self._cached_as(name, version, offset, end)
        data = None if self.cache is None else self.cache.get(cached_as)
        if data is None:
            data = self._get(name, f"bytes={offset}-{end}", version)
            if self.cache is not None:
                self.cache.put(cached_as, data)
        return data

    def _get(self, key: str, byte_range: str, version: str) -> bytes:
        from botocore.exceptions import IncompleteReadError, ReadTimeoutError, ResponseStreamingError

        pinned = {"IfMatch": version} if version else {}
        attempt = 1
        while True:
            answer = self.client().get_object(Bucket=self.root.bucket, Key=key, Range=byte_range, **pinned)
            try:
                return bytes(answer["Body"].read())
            except (IncompleteReadError, ReadTimeoutError, ResponseStreamingError):
                if attempt == RETRY_ATTEMPTS:
                    raise
                time.sleep(min(20.0, 0.1 * 2**attempt))
                attempt += 1

    def open(self, name: str, size: int, version: str = "") -> BinaryIO:
        return io.BufferedReader(_Ranged(self, name, size, version), INDEX_READ_BYTES)

    def shown(self, name: str) -> str:
        return self.root.uri(name)


def store_files(root: StoreRoot, cache_bytes: int) -> StoreFiles:
    """The ranks' reader of data.root, with the job's cache on this host (none: data.cache_bytes 0)."""
    cache = ByteCache(run_dir_from_env() / CACHE_FOLDER, cache_bytes) if cache_bytes else None
    return StoreFiles(root, cache)

"""A job's local cache of what its ranks read from an object store, bounded by data.cache_bytes: one folder
on each host, shared by its ranks and their loader workers, that the next epoch (or a restarted attempt of the
same run) reads instead of the network.

Entries are files named by what they hold (the object's key, version and byte range), written to a temporary
name and renamed, so a reader sees a whole entry or none. Every process adds what it writes to a count kept
in one file under a lock; when the count passes the bound, that process lists the folder and deletes the
least recently read entries down to 90% of it: a listing per tenth of the bound written, not per entry.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

COUNT_FILE = ".bytes"
LOCK_PREFIX = ".fill-"
LOCK_STRIPES = 64
ENTRY_SUFFIX = ".bin"
# Eviction goes below the bound by this share, so that the next listing waits for that much more.
LOW_WATER = 0.9


class ByteCache:
    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes

    def _entry(self, name: str) -> Path:
        return self.folder / (hashlib.sha256(name.encode()).hexdigest() + ENTRY_SUFFIX)

    def get(self, name: str, offset: int = 0, length: int = -1) -> bytes | None:
        """The entry's bytes from `offset`, `length` of them (-1: to its end); None if it is not held."""
        path = self._entry(name)
        try:
            with open(path, "rb") as entry:
                entry.seek(offset)
                data = entry.read(length)
        except FileNotFoundError:
            return None
        with contextlib.suppress(FileNotFoundError):  # evicted meanwhile by another process: still read
            os.utime(path)  # its read time orders eviction
        return data

    def keeps_all(self, total_bytes: int) -> bool:
        """Whether entries of `total_bytes` in all stay without evicting one another."""
        return total_bytes <= self.max_bytes * LOW_WATER

    def holds(self, size: int) -> bool:
        """Whether an entry of `size` bytes is kept: one that would evict a tenth of the cache at once is
        read from the store each time."""
        return size <= self.max_bytes * (1 - LOW_WATER)

    @contextlib.contextmanager
    def filling(self, name: str) -> Iterator[None]:
        """Held while one process reads `name` from the store to put it here: another that wants it waits,
        then finds it. Names share a fixed set of lock files, so the folder never holds one per entry."""
        self.folder.mkdir(parents=True, exist_ok=True)
        stripe = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % LOCK_STRIPES
        with open(self.folder / f"{LOCK_PREFIX}{stripe:02d}", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            yield

    def put(self, name: str, data: bytes) -> None:
        if not self.holds(len(data)):
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._entry(name)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_bytes(data)
        partial.rename(path)
        self._count(len(data))

    def _count(self, added: int) -> None:
        with open(self.folder / COUNT_FILE, "a+b") as counter:
            fcntl.flock(counter, fcntl.LOCK_EX)  # released when the file closes
            counter.seek(0)
            total = int(counter.read() or b"0") + added
            if total > self.max_bytes:
                total = self._evict()
            counter.seek(0)
            counter.truncate()
            counter.write(str(total).encode())

    def _evict(self) -> int:
        """Delete the least recently read entries down to LOW_WATER of the bound; returns what is left."""
        entries = []
        for found in os.scandir(self.folder):
            if found.name.endswith(ENTRY_SUFFIX) and not found.name.startswith("."):
                with contextlib.suppress(FileNotFoundError):
                    stat = found.stat()
                    entries.append((stat.st_mtime_ns, stat.st_size, found.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes * LOW_WATER:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            total -= size
        return total

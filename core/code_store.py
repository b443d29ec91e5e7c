"""Code bundles: users' own modules, content-addressed by the sha256 of the archive they uploaded, unpacked
once per host into a read-only folder that jobs import from.

On disk, under TRAINYARD_CODE_DIR:
    <hex>/                      the bundle, unpacked, read-only; what the sandbox binds into a job
    archives/<hex>.tar[.gz]     the archive as uploaded, from which a host that lacks the folder unpacks it
    .incoming/<user>/           uploads being received, a folder per user: their files count against the
                                user's quota while they arrive
    .unpack-*                   archives being unpacked, once their headers passed every check
                                (core/code_unpack.py::check); nothing outside is written until the files
                                have too
With artifact_store=s3 the archive is also stored at <s3_prefix>/code/<hex>, so that a worker on another
host fetches it, checks its hash and unpacks it (`ensure_unpacked`).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from botocore.exceptions import BotoCoreError, ClientError

from core.code_unpack import Limits, Manifest, UnsafeArchive, check, is_gzip, remove_tree, unpack
from core.config import Settings
from core.storage import object_store

log = logging.getLogger(__name__)

CODE_ID_PREFIX = "sha256:"
ARCHIVES = "archives"
INCOMING = ".incoming"
HASH_CHUNK = 1 << 20


class ArchiveTooLarge(Exception):
    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            f"the archive is over {max_bytes} bytes (TRAINYARD_CODE_MAX_BYTES); leave data, weights and "
            "outputs out with .trainyardignore and read data from TRAINYARD_DATA_DIR"
        )


class BundleUnavailable(Exception):
    """A worker cannot unpack the bundle a job names; the message says why and what to do."""


def code_hex(code_id: str) -> str:
    return code_id.removeprefix(CODE_ID_PREFIX)


def bundle_dir(settings: Settings, code_id: str) -> Path:
    """Where a bundle is unpacked on this host: `<code_dir>/<hex digest>`."""
    return settings.code_dir / code_hex(code_id)


def archive_path(settings: Settings, code_id: str, gzipped: bool) -> Path:
    suffix = ".tar.gz" if gzipped else ".tar"
    return settings.code_dir / ARCHIVES / f"{code_hex(code_id)}{suffix}"


def stored_archive(settings: Settings, code_id: str) -> Path | None:
    """This host's copy of the bundle's archive, if it has one."""
    return next((p for p in (archive_path(settings, code_id, g) for g in (True, False)) if p.exists()), None)


def is_stored(settings: Settings, code_id: str) -> bool:
    return bundle_dir(settings, code_id).is_dir() and stored_archive(settings, code_id) is not None


def limits(settings: Settings, room: int | None = None) -> Limits:
    return Limits(settings.code_max_unpacked_bytes, settings.code_max_files, settings.code_max_depth, room)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def uploads_folder(settings: Settings, owner: str) -> Path:
    """Where `owner`'s uploads arrive, named by a hash as a user name may hold any character."""
    return settings.code_dir / INCOMING / hashlib.sha256(owner.encode()).hexdigest()[:32]


def receiving_bytes(settings: Settings, owner: str, besides: Path | None = None) -> int:
    """The bytes that `owner`'s uploads in progress on this host (but `besides`) have written so far. A file
    untouched for longer than an upload may last is no upload's: a process that died left it."""
    live_since = time.time() - settings.code_upload_timeout_s
    total = 0
    try:
        with os.scandir(uploads_folder(settings, owner)) as entries:
            for entry in entries:
                try:
                    info = entry.stat()
                except FileNotFoundError:  # that upload ended meanwhile
                    continue
                if entry.path != str(besides) and info.st_mtime >= live_since:
                    total += info.st_size
    except FileNotFoundError:  # no upload of the owner's yet
        pass
    return total


class Incoming:
    """An upload as it arrives: into a temporary file, hashed on the way, refused once past `max_bytes`."""

    def __init__(self, file: IO[bytes], path: Path, settings: Settings, owner: str) -> None:
        self.file = file
        self.path = path
        self.settings = settings
        self.owner = owner
        self.max_bytes = settings.code_max_bytes
        self.size = 0
        self._digest = hashlib.sha256()

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise ArchiveTooLarge(self.max_bytes)
        self._digest.update(chunk)
        self.file.write(chunk)
        self.file.flush()  # on disk at once, where the owner's other uploads count it (receiving_bytes)

    def pending(self) -> int:
        """The bytes this upload has received and those of its owner's other uploads in progress."""
        return self.size + receiving_bytes(self.settings, self.owner, besides=self.path)

    @property
    def code_id(self) -> str:
        return f"{CODE_ID_PREFIX}{self._digest.hexdigest()}"


@contextmanager
def _temporary_file(folder: Path) -> Iterator[Path]:
    """A new file in `folder`, under the code directory (so that keeping it is a rename), removed on the way
    out unless it was kept; `.part` is where ObjectStore.download writes before its own rename."""
    folder.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(dir=folder)
    os.close(descriptor)
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)
        Path(f"{name}.part").unlink(missing_ok=True)


@contextmanager
def incoming(settings: Settings, owner: str) -> Iterator[Incoming]:
    with _temporary_file(uploads_folder(settings, owner)) as path, path.open("wb") as file:
        yield Incoming(file, path, settings, owner)


@contextmanager
def locked(settings: Settings) -> Iterator[None]:
    """One store or removal at a time across this host's API processes: a bundle removed while the same
    bytes are pushed again would otherwise leave a row whose files are gone."""
    settings.code_dir.mkdir(parents=True, exist_ok=True)
    with (settings.code_dir / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _unpack_into_place(settings: Settings, archive: Path, code_id: str, room: int | None = None) -> Manifest:
    """Unpacks into a temporary sibling of the bundle's folder, then renames it into place: a job never sees
    half a bundle. The archive's headers are checked first, so that a refused one writes nothing: a few KiB
    of deep paths would otherwise make thousands of folders, and remove them, before the cap stops them."""
    bounds = limits(settings, room)
    check(archive, bounds)
    settings.code_dir.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=settings.code_dir, prefix=".unpack-"))
    try:
        manifest = unpack(archive, temporary, bounds)
        try:
            temporary.rename(bundle_dir(settings, code_id))
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            # Another process unpacked the same bytes first: the folder it made holds the same files.
    finally:
        remove_tree(temporary)
    return manifest


def store(settings: Settings, upload: Incoming, room: int | None = None) -> Manifest:
    """Checks and unpacks a received archive into at most `room` bytes on disk, keeps it (and puts it in the
    object store, if there is one). Idempotent: the same bytes again find the same places. Raises
    UnsafeArchive or QuotaPassed with nothing kept."""
    manifest = _unpack_into_place(settings, upload.path, upload.code_id, room)
    kept = archive_path(settings, upload.code_id, is_gzip(upload.path))
    kept.parent.mkdir(parents=True, exist_ok=True)
    upload.path.chmod(0o444)
    upload.path.replace(kept)
    if (objects := object_store(settings)) is not None:
        objects.put_file(kept, objects.code_key(code_hex(upload.code_id)))
    return manifest


def _fetch(settings: Settings, code_id: str) -> Path:
    """The archive from the object store, into archives/ once its hash is checked."""
    objects = object_store(settings)
    if objects is None or not objects.exists(key := objects.code_key(code_hex(code_id))):
        raise BundleUnavailable(
            f"code bundle {code_id} is not in this host's TRAINYARD_CODE_DIR nor in an object store; "
            "push it again with `trainyard code push DIR`, or share TRAINYARD_CODE_DIR between hosts"
        )
    with _temporary_file(settings.code_dir / INCOMING) as fetched:
        objects.download(key, fetched)
        if sha256_file(fetched) != code_hex(code_id):
            raise BundleUnavailable(f"the object store's copy of code bundle {code_id} does not match its id")
        kept = archive_path(settings, code_id, is_gzip(fetched))
        kept.parent.mkdir(parents=True, exist_ok=True)
        fetched.chmod(0o444)
        fetched.replace(kept)
    return kept


def ensure_unpacked(settings: Settings, code_id: str) -> Path:
    """The bundle's folder on this host, unpacked first if it is missing: from this host's archive or the
    object store's, either checked against the id. A worker calls it before it launches a job."""
    folder = bundle_dir(settings, code_id)
    if folder.is_dir():
        return folder
    archive = stored_archive(settings, code_id) or _fetch(settings, code_id)
    if sha256_file(archive) != code_hex(code_id):
        raise BundleUnavailable(
            f"this host's archive of code bundle {code_id} does not match its id; delete the bundle and push "
            "it again"
        )
    try:
        _unpack_into_place(settings, archive, code_id)
    except UnsafeArchive as exc:  # a stricter TRAINYARD_CODE_MAX_* on this host than on the API's
        raise BundleUnavailable(f"code bundle {code_id} cannot be unpacked on this host: {exc}") from exc
    return folder


def remove(settings: Settings, code_id: str) -> None:
    """The folder, the archive and the object store's copy. Other hosts keep their unpacked folders, which
    hold the same bytes should the bundle be pushed again."""
    remove_tree(bundle_dir(settings, code_id))
    if (archive := stored_archive(settings, code_id)) is not None:
        archive.unlink()
    if (objects := object_store(settings)) is not None:
        try:
            objects.delete(objects.code_key(code_hex(code_id)))
        except (BotoCoreError, ClientError):
            # The row is gone already; the object is unreachable garbage, not a bundle anyone can use.
            log.exception("could not delete code bundle %s from the object store", code_id)

"""data.root as the loaders list it: a folder under TRAINYARD_DATA_DIR or an s3:// prefix, each giving the
files under it (a name to read through trainers/data/files.py, a path relative to the root, a size, a
version) and the class folders image_folder counts. shards, tokens and image_folder see only this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from jobspec.data_store import StoredObject, is_store_root, parse_store_root
from jobspec.datadir import confined_file, data_dir_from_env, resolve_data_root, shown_data_path
from jobspec.spec import DataSpec
from trainers.data.files import Files, LocalFiles, StoreFiles, store_files

Wanted = Callable[[str], bool]  # of a path relative to the root


@dataclass(frozen=True)
class Entry:
    name: str  # what Files reads: a real path, or an object's key
    relative: str  # under data.root, '/'-separated
    size: int
    version: str = ""  # an object's ETag


class Root(Protocol):
    @property
    def files(self) -> Files: ...

    @property
    def shown(self) -> str:
        """data.root as messages show it."""
        ...

    def entries(self, wanted: Wanted, recursive: bool) -> list[Entry]:
        """The wanted files under the root (recursive: in its folders too), in name order: what the job
        reads, which an object store's reads are sized by (StoreFiles.expect)."""
        ...

    def folders(self) -> list[str]:
        """The root's folders, in name order, leaving out hidden ones."""
        ...


class LocalRoot:
    def __init__(self, data_dir: Path, root: Path) -> None:
        self.files = LocalFiles(data_dir)
        self.data_dir, self.root = data_dir, root
        self.shown = shown_data_path(data_dir, root)

    def entries(self, wanted: Wanted, recursive: bool) -> list[Entry]:
        found = []
        for path in sorted(self.root.rglob("*") if recursive else self.root.iterdir()):
            relative = path.relative_to(self.root).as_posix()
            if wanted(relative) and path.is_file():
                real = confined_file(self.data_dir, path)  # a link inside may lead anywhere
                found.append(Entry(str(real), relative, real.stat().st_size))
        return found

    def folders(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))


class ObjectRoot:
    def __init__(self, files: StoreFiles) -> None:
        self.files = files
        self.shown = files.root.uri()
        self._listed: dict[bool, list[StoredObject]] = {}  # image_folder asks twice: folders, then files

    def entries(self, wanted: Wanted, recursive: bool) -> list[Entry]:
        if recursive not in self._listed:
            self._listed[recursive] = self.files.listing(delimiter=not recursive)
        relative = self.files.root.relative
        found = [
            Entry(listed.key, relative(listed.key), listed.size, listed.etag)
            for listed in self._listed[recursive]
            if wanted(relative(listed.key))
        ]
        self.files.expect(sum(entry.size for entry in found))
        return found

    def folders(self) -> list[str]:
        """An object store has no folders, only keys: those of the files in one."""
        parts = (entry.relative.split("/") for entry in self.entries(lambda _: True, recursive=True))
        return sorted({p[0] for p in parts if len(p) > 1 and not p[0].startswith(".")})


def open_root(root: str, cache_bytes: int, data_dir: Path) -> Root:
    """data.root, in the data dir or an object store, whose reads the job's cache keeps up to cache_bytes."""
    if is_store_root(root):
        return ObjectRoot(store_files(parse_store_root(root), cache_bytes))
    return LocalRoot(data_dir, resolve_data_root(data_dir, root))


def data_root(data: DataSpec) -> tuple[str, int, Path]:
    """open_root's arguments for a spec's data.root: what a cached listing is keyed by."""
    assert data.root is not None  # the spec requires a root for on-disk datasets
    return data.root, data.cache_bytes, data_dir_from_env()

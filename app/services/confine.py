"""Paths a spec names stay where they belong: data under TRAINYARD_DATA_DIR, checkpoints under the runs
directory or in the object store's bucket and prefix. The spec already refuses '..' and absolute paths; this
catches what only the disk knows."""

from __future__ import annotations

from pathlib import Path

from app.services.errors import InvalidSpec
from core.config import Settings
from core.storage import is_object_uri, locate
from jobspec.data_store import is_store_root
from jobspec.datadir import resolve_data_root
from jobspec.files import inside


def check_data_root(settings: Settings, root: str | None) -> None:
    """The trainer makes the same check when it loads, with the data dir the worker hands it."""
    if root is None or is_store_root(root):
        return  # an object store's is listed (app/services/data_listing.py)
    try:
        resolve_data_root(settings.data_dir, root)
    except ValueError as exc:
        raise InvalidSpec("data.root", str(exc)) from exc


def check_checkpoint_path(settings: Settings, field: str, path: str) -> None:
    if is_object_uri(path):
        if locate(settings, path) is None:
            raise InvalidSpec(
                field,
                "that checkpoint is stored outside TRAINYARD_S3_BUCKET/TRAINYARD_S3_PREFIX (or the object "
                "store is off); resume from another checkpoint",
            )
    elif inside(Path(path), settings.runs_dir) is None:
        raise InvalidSpec(
            field, "that checkpoint's file leads outside the runs directory; resume from another checkpoint"
        )

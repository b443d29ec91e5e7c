"""Paths a spec names stay where they belong: data under TRAINYARD_DATA_DIR, checkpoints under the runs
directory. The spec already refuses '..' and absolute paths; this catches what only the disk knows."""

from __future__ import annotations

from pathlib import Path

from app.core.config import Settings
from app.services.errors import InvalidSpec


def confined(path: Path, root: Path) -> bool:
    """Whether `path`, with every symlink followed, lies inside `root`."""
    return path.resolve().is_relative_to(root.resolve())


def check_data_root(settings: Settings, root: str | None) -> None:
    if root is not None and not confined(settings.data_dir / root, settings.data_dir):
        raise InvalidSpec(
            "data.root",
            f"data.root {root!r} leads outside TRAINYARD_DATA_DIR (through a symlink); "
            "name a directory that really is inside it",
        )


def check_checkpoint_path(settings: Settings, field: str, path: str) -> None:
    if not confined(Path(path), settings.runs_dir):
        raise InvalidSpec(
            field, "that checkpoint's file leads outside the runs directory; resume from another checkpoint"
        )

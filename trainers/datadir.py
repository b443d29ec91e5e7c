"""Where on-disk datasets may be read from: data.root under TRAINYARD_DATA_DIR, and nowhere else.

Shared by the API (refuse at submit) and the trainer (refuse at load); no torch import.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "TRAINYARD_DATA_DIR"
DEFAULT_DATA_DIR = Path("var") / "data"


def data_dir_from_env() -> Path:
    """The worker passes its own resolved data dir, so the trainer reads exactly what the API checked."""
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).resolve()


def resolve_data_root(data_dir: Path, root: str) -> Path:
    """The real directory data.root names; raises ValueError naming data.root when it is missing or when
    it (or a symlink on its way) leads outside data_dir."""
    base = data_dir.resolve()
    # resolve() follows every symlink, so a link inside data_dir that points elsewhere is caught here.
    path = (base / root).resolve()
    if not path.is_relative_to(base):
        raise ValueError(
            f"data.root {root!r} leads outside {DATA_DIR_ENV} ({base}), through a symlink; "
            "copy or mount the dataset inside it"
        )
    if not path.is_dir():
        raise ValueError(
            f"data.root {root!r} is not a directory under {DATA_DIR_ENV} ({base}); "
            "put the dataset there (nothing is downloaded) or fix the path"
        )
    return path

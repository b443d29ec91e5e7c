"""Run directories taken out of use. A job's files live at runs/<id>/, so whatever is left there would be
read as the files of the next job given that id: a directory is moved aside, in one rename, to a name that no
job id takes."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SET_ASIDE = ".set-aside"


def set_aside(run_dir: Path) -> Path | None:
    """Rename `run_dir` to <runs>/.set-aside/<id>.<random> and return that path; None when there is none.
    Raises OSError when it cannot be moved, leaving it where it was."""
    if not os.path.lexists(run_dir):
        return None
    target = run_dir.parent / SET_ASIDE / f"{run_dir.name}.{secrets.token_hex(8)}"
    target.parent.mkdir(exist_ok=True)
    try:
        run_dir.rename(target)
    except FileNotFoundError:  # removed meanwhile
        return None
    return target

"""Server paths as users read them. A folder the settings name (TRAINYARD_DATA_DIR, TRAINYARD_RUNS_DIR,
TRAINYARD_CODE_DIR) is written as that variable in messages and plans, so a user learns where a file is in
terms the server's docs use, and nothing of the server's own layout. No torch: the API and the trainer share
it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path


def with_placeholders(text: str, roots: Mapping[str, Path]) -> str:
    """`text` with each root's absolute path written as `$NAME`; a root inside another is matched first."""
    for name, root in sorted(roots.items(), key=lambda item: len(str(item[1])), reverse=True):
        # Whole path components only: a root /srv/runs leaves /srv/runs2 alone.
        pattern = re.escape(str(root)) + r"(?![\w.-])"
        text = re.sub(pattern, f"${name}", text)  # names are plain words: nothing in them is a backreference
    return text

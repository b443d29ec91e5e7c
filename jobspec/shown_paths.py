"""Server paths as users read them. A folder the settings name (TRAINYARD_DATA_DIR, TRAINYARD_RUNS_DIR,
TRAINYARD_CODE_DIR) is written as that variable in messages and plans, so a user learns where a file is in
terms the server's docs use, and nothing of the server's own layout. No torch: the API and the trainer share
it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=64)
def _root_pattern(root: str) -> re.Pattern[str]:
    # Whole path components only: a root /srv/runs leaves /srv/runs2 alone.
    return re.compile(re.escape(root) + r"(?![\w.-])")


class Placeholders:
    """Writes each root's absolute path as `$NAME` in a text; a root inside another is matched first. Made
    once for all the strings of a plan: the API shows every string of every plan it lists so, and a root not
    in a text then costs one substring scan."""

    def __init__(self, roots: Mapping[str, Path]) -> None:
        longest_first = sorted(roots.items(), key=lambda item: len(str(item[1])), reverse=True)
        # Names are plain words: nothing in them is a backreference.
        self.roots = [(f"${name}", str(root)) for name, root in longest_first]
        # Each root as JSON writes it inside a string, ASCII-escaped or not.
        escaped = {
            (name, json.dumps(path, ensure_ascii=ascii)[1:-1])
            for name, path in self.roots
            for ascii in (True, False)
        }
        self.json_roots = sorted(escaped, key=lambda root: len(root[1]), reverse=True)

    def __call__(self, text: str) -> str:
        return self._written(text, self.roots)

    def in_json(self, document: str) -> str:
        """The same in every string of a JSON document, keys included, in one pass per root over its text."""
        return self._written(document, self.json_roots)

    @staticmethod
    def _written(text: str, roots: list[tuple[str, str]]) -> str:
        for placeholder, path in roots:
            if path in text:
                text = _root_pattern(path).sub(placeholder, text)
        return text


def with_placeholders(text: str, roots: Mapping[str, Path]) -> str:
    """`text` with each root's absolute path written as `$NAME` (Placeholders)."""
    return Placeholders(roots)(text)

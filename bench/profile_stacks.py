"""Where a sampled process spent its time: py-spy's raw (collapsed) stacks reduced to two small tables.

A raw line is `frame;frame;...;frame count`, outermost first, each frame `function (path:line)`. Sampled with
`--gil`, each sample is the thread holding the GIL, so the shares are of the Python work the process did
(time in C with the GIL released, like SQLite's own I/O, is not in them).
"""

from __future__ import annotations

import re
from collections import Counter

from bench.table import markdown

FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^():]+)(?::\d+)?\)$")
TOP = 12
OURS = ("app", "worker", "trainers")


def package(path: str) -> str:
    """The top-level package or module a file belongs to. py-spy shortens paths to be relative to their
    sys.path entry (`sqlalchemy/engine/default.py`, `threading.py`); a full path keeps the part after
    site-packages."""
    parts = path.replace("\\", "/").split("/")
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1 :]
    return parts[0 if parts[0] else -1].removesuffix(".py")


def _frames(stack: str) -> list[tuple[str, str]]:
    found = []
    for frame in stack.split(";"):
        match = FRAME.match(frame.strip())
        if match:
            found.append((match["function"], match["path"]))
    return found


def summarize(raw: str) -> str:
    """Busy time by the library its innermost frame is in, and the project's own functions by inclusive
    time (a function counted once per sample however deep it recurses)."""
    by_package: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = _frames(stack)
        if not count_text.isdigit() or not frames:
            continue
        count = int(count_text)
        total += count
        by_package[package(frames[-1][1])] += count
        own = {(function, path) for function, path in frames if package(path) in OURS}
        ours.update({f"{function} ({path.rsplit('/', 1)[-1]})": count for function, path in own})
    if not total:
        return ""

    def rows(counter: Counter[str]) -> list[list[str]]:
        return [[key, f"{100 * count / total:.1f} %"] for key, count in counter.most_common(TOP)]

    packages = markdown(("innermost frame in", "busy time"), rows(by_package))
    functions = markdown(("project function", "busy time, inclusive"), rows(ours))
    return f"API profile (py-spy, {total} busy samples):\n\n{packages}\n\n{functions}"

"""The README and the guides in docs/ as the docs tests read them: their headings' anchors as GitHub makes
them, their relative links, and their fenced code blocks, some marked runnable.

A block is runnable when its fence's info string says so after the language, which GitHub ignores when it
highlights: ```` ```bash runnable ```` runs and must exit 0; ```` ```bash runnable refused ```` shows a
request the API refuses, and must fail with the API's answer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUNNABLE = "runnable"
REFUSED = "refused"

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>.*)$")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")


def doc_files() -> list[Path]:
    """The README first, then every guide: the order in which a newcomer meets their commands."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # the opening fence's, counted from 1
    info: tuple[str, ...]  # the info string's words: ("bash", "runnable")
    code: str

    @property
    def runnable(self) -> bool:
        return RUNNABLE in self.info[1:]

    @property
    def refused(self) -> bool:
        return REFUSED in self.info[1:]

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _lines_outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the prose: what is not inside a fenced block."""
    prose, fence = [], ""
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if match and not fence:
            fence = match["fence"]
        elif match and line.strip() == fence:
            fence = ""
        elif not fence:
            prose.append((number, line))
    return prose


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block, its indentation (inside a list item) taken off its lines."""
    blocks: list[Block] = []
    opened: tuple[int, str, str, tuple[str, ...]] | None = None
    body: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = FENCE.match(line)
        if opened is None and match:
            opened, body = (number, match["indent"], match["fence"], tuple(match["info"].split())), []
        elif opened is not None and line.strip() == opened[2]:
            blocks.append(Block(path, opened[0], opened[3], "\n".join(body) + "\n"))
            opened = None
        elif opened is not None:
            body.append(line.removeprefix(opened[1]))
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (`_` and `-` kept), spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _lines_outside_fences(path.read_text()):
        if match := HEADING.match(line):
            base = slug(match[2])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of each link in the prose that leads into the repository, not to a web address."""
    links = []
    for number, line in _lines_outside_fences(path.read_text()):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            target = match["target"]
            if not re.match(r"^[a-z][a-z+.-]*:", target):
                links.append((number, target))
    return links


def section(path: Path, heading: str) -> list[Block]:
    """The fenced blocks under a `## heading`, up to the next heading of that level."""
    start = end = None
    for number, line in _lines_outside_fences(path.read_text()):
        if line.startswith("## ") and start is not None and end is None:
            end = number
        if line == f"## {heading}":
            start = number
    assert start is not None, f"{path.name} has no section '## {heading}'"
    return [b for b in fenced_blocks(path) if start < b.line < (end or 10**9)]

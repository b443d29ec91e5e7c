"""Where results go: printed always, appended to bench/RESULTS.md unless --smoke.

Every entry starts with the same heading (device, GPU count, date, torch version) and the exact command, so
RESULTS.md says where and how each number was taken. No torch import: the version comes from the metadata.
"""

from __future__ import annotations

import shlex
import sys
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

RESULTS_MD = Path(__file__).with_name("RESULTS.md")


def command_line() -> str:
    """The command as the person at the GPU machine typed it: `python -m bench.<script> <args>`."""
    module = Path(sys.argv[0]).stem
    return " ".join(["python -m bench." + module, shlex.join(sys.argv[1:])]).strip()


def section(device: str, gpus: int | None, body: str) -> str:
    """A RESULTS.md entry: where and when it ran, the exact command, then the body (tables, notes)."""
    where = device if gpus is None else f"{device} x {gpus}"
    heading = f"## {where}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, torch {version('torch')}"
    return f"{heading}\n\n`{command_line()}`\n\n{body}\n"


def record(text: str, smoke: bool) -> None:
    """Print the entry; append it to RESULTS.md unless this was a smoke run, whose numbers mean nothing."""
    print("\n" + text, flush=True)
    if not smoke:
        with RESULTS_MD.open("a", encoding="utf-8") as f:
            f.write("\n" + text)

"""Failures of the user's code, told in the user's terms: what failed, and the frames of the traceback that
lie inside the code bundle (file relative to it, line, source), without the trainer's and torch's own.

A UserCodeError's message starts with MARKER: torchrun's error file records it as
"UserCodeError: user_code_error: ...", which the worker reads to fail the job at once (the same code would
fail the same way on a restart).
"""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

MARKER = "user_code_error"
# A frame as the traceback module formats it; SyntaxError's own location has no ", in name".
_FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<name>.+))?$')
# DataLoader re-raises a worker's exception with the worker's traceback as text inside the message.
_WORKER_TRACEBACK = "Original Traceback"


class PlatformError(Exception):
    """The service's fault, not the user's, wherever it surfaces (a checkpoint the worker handed the job that
    the job cannot read): the worker reads "PlatformError: " in the error file and restarts the job while
    its restarts last, rather than blaming the user's code."""


# Failures that are not the code's fault however deep in it they surface: a peer or a collective gone (which
# the worker may retry), memory exhausted (which the worker reports as such), the platform's own.
_NOT_THE_CODE = (dist.DistError, torch.OutOfMemoryError, PlatformError)


class UserCodeError(Exception):
    def __init__(self, summary: str, frames: Sequence[str] = ()) -> None:
        self.summary = summary
        self.frames = tuple(frames)
        super().__init__("\n".join([f"{MARKER}: {summary}", *self.frames]))


def inside_bundle(file: str, root: Path) -> str | None:
    """`file` relative to the bundle, or None when it lies outside."""
    if file.startswith("<"):
        # Code without a file (<frozen runpy>, <string>): its name, taken as a path, would resolve against
        # the working directory, which is the bundle for a program job.
        return None
    for path in {os.path.abspath(file), os.path.realpath(file)}:
        for base in {str(root), os.path.realpath(root)}:
            if path.startswith(base + os.sep):
                return path[len(base) + 1 :]
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def bundle_frames(text: str, root: Path) -> list[str]:
    """The frames of a formatted traceback that lie inside the bundle, each with its source line."""
    lines = text.splitlines()
    kept: list[str] = []
    for i, line in enumerate(lines):
        match = _FRAME.match(line)
        where = match and inside_bundle(match["file"], root)
        if not match or not where:
            continue
        name = f", in {match['name']}" if match["name"] else ""
        kept.append(f"  {where}, line {match['line']}{name}")
        source = lines[i + 1] if i + 1 < len(lines) else ""
        # The source line is indented under its frame; a caret line under it is not worth keeping.
        if source.strip() and _indent(source) > _indent(line) and source.strip(" ^~") != "":
            kept.append(f"    {source.strip()}")
    return kept


def error_line(exc: BaseException) -> str:
    """`Type: message`: the last line where the error is reported after its location or a worker's frames."""
    lines = "".join(traceback.format_exception_only(exc)).strip().splitlines()
    if isinstance(exc, SyntaxError) or _WORKER_TRACEBACK in str(exc):
        return lines[-1].strip()
    return lines[0]


def failure(what: str, exc: BaseException, root: Path, defined_at: str | None = None) -> UserCodeError:
    """`what` (a field and its entry point, or "your code") raised `exc`; defined_at is shown where none of
    the frames lie in the bundle (a factory called with kwargs it does not take)."""
    frames = bundle_frames("".join(traceback.format_exception(exc)), root)
    if not frames and defined_at is not None:
        frames = [f"  ({defined_at})"]
    return UserCodeError(f"{what} raised {error_line(exc)}", frames)


def blamed(exc: Exception, root: Path) -> UserCodeError | None:
    """The UserCodeError `exc` is, when it was raised inside the bundle's code; None when it is not the
    code's fault or happened outside it."""
    if isinstance(exc, (UserCodeError, *_NOT_THE_CODE)):
        return None
    error = failure("your code", exc, root)
    return error if error.frames else None


@contextmanager
def blaming(code_dir: str | None) -> Iterator[None]:
    """Exceptions raised in the bundle's code while training (a model's forward, a dataset's __getitem__, a
    loss) leave as UserCodeErrors showing the user's frames; any other exception leaves as it came."""
    try:
        yield
    except Exception as exc:
        error = None if code_dir is None else blamed(exc, Path(os.path.abspath(code_dir)))
        if error is None:
            raise
        raise error from exc

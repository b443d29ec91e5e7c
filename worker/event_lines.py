"""The lines of a job's events file: split as they are read, each parsed into an event or, when it is none the
worker can store (not UTF-8, not JSON, too long, a field out of the bounds of jobspec/events.py), into a
BadLine that says where and why."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from jobspec.events import MAX_EVENT_BYTES, Event, parse_event


@dataclass(frozen=True)
class BadLine:
    """A line that is no event the worker can store (not JSON, too long, a field out of bounds): skipped,
    and the job told once."""

    offset: int  # of the line in the file
    why: str


Read = Event | BadLine


def split_lines(chunk: bytes, mid_line: bool) -> tuple[int, list[tuple[int, bytes]]]:
    """How many bytes of `chunk` to consume, and the complete lines in them with their offsets in it. The
    rest of a line too long to read, which `mid_line` says the chunk starts in, is consumed unread; a last
    line that is already too long before its newline is consumed too, and given as its first bytes, which
    then fail as too long: each such line counts once, and memory stays bounded by the read."""
    start = chunk.find(b"\n") + 1 if mid_line else 0
    if mid_line and start == 0:
        return len(chunk), []
    end = max(chunk.rfind(b"\n") + 1, start)
    lines: list[tuple[int, bytes]] = []
    at = start
    for line in chunk[start:end].split(b"\n")[:-1]:
        lines.append((at, line))
        at += len(line) + 1
    if len(chunk) - end > MAX_EVENT_BYTES:
        return len(chunk), [*lines, (end, chunk[end : end + MAX_EVENT_BYTES + 1])]
    return end, lines


def parse_line(line: bytes, offset: int) -> Read | None:
    # One bad line must not stop the stream, nor be retried forever: it is skipped, and said so.
    if len(line) > MAX_EVENT_BYTES:
        return BadLine(offset, f"the line is longer than {MAX_EVENT_BYTES} bytes")
    if not line.strip():
        return None
    try:
        return parse_event(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return BadLine(offset, f"the line is not UTF-8 ({exc.reason} at its byte {exc.start})")
    except ValidationError as exc:
        return BadLine(offset, _errors(exc))


def _errors(exc: ValidationError) -> str:
    """Pydantic's first errors, each where it is, cut short: a bad key can be as long as its line."""
    said = []
    for error in exc.errors(include_url=False, include_input=False)[:3]:
        # A key may hold any character: those that do not print (NUL, which PostgreSQL refuses) are escaped.
        where = ".".join(
            _shorten(str(part) if str(part).isprintable() else ascii(part), 40) for part in error["loc"]
        )
        said.append(f"{where}: {_shorten(error['msg'], 200)}" if where else _shorten(error["msg"], 200))
    return "; ".join(said)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…"

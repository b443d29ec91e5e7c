"""A job's secret values masked out of what the service shows of its output: each occurrence becomes `****`.
One rule for the logs as the API serves them (`masked_read`) and for the text the worker quotes of them into
SQL (`masked_text`: a failed job's message, its ranks' stacks).

Logs are read in byte ranges that a client follows by offset, so a value may straddle two reads. A read
looks back and ahead by the longest value less one byte: an occurrence that starts before the range is
masked from the range's start, and one that runs past its end extends the range to the occurrence's end, so
the next read starts after it. While the job runs, a range that ends in the first bytes of a value (the rest
not written yet) stops before them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

MASK = b"****"


def _covered(window: bytes, values: Sequence[bytes]) -> list[tuple[int, int]]:
    """The spans of `window` that hold a value, overlapping ones merged, in order."""
    spans = []
    for value in values:
        at = window.find(value)
        while at != -1:
            spans.append((at, at + len(value)))
            at = window.find(value, at + 1)
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(stop, merged[-1][1]))
        else:
            merged.append((start, stop))
    return merged


def _values(secrets: Iterable[str]) -> list[bytes]:
    """The values to look for, longest first; an empty one would match everywhere."""
    return sorted({s.encode() for s in secrets if s}, key=len, reverse=True)


def _masked(window: bytes, spans: Iterable[tuple[int, int]], start: int, end: int) -> bytes:
    """window[start:end] with each span of a value in it shown as MASK."""
    shown = bytearray()
    at = start
    for span_start, span_stop in spans:
        if span_stop <= start or span_start >= end:
            continue
        shown += window[at : max(at, span_start)] + MASK
        at = span_stop
    shown += window[at:end]
    return bytes(shown)


def masked_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of a secret's value masked. A value is whole UTF-8, so each occurrence in
    the encoded text starts and ends on a character's boundary."""
    values = _values(secrets)
    if not values:
        return text
    data = text.encode(errors="surrogatepass")
    return _masked(data, _covered(data, values), 0, len(data)).decode(errors="surrogatepass")


def _longest_tail_beginning(data: bytes, value: bytes) -> int:
    """How many of `data`'s last bytes `value` begins with (at most len(value)). Knuth-Morris-Pratt over
    data's last len(value) bytes, so linear in the value's length: trying each tail in turn would be
    quadratic in it on self-similar text, and a value may be 64 KiB."""
    fail = [0] * len(value)  # fail[i]: the longest proper prefix of value[: i + 1] that is also its suffix
    for i in range(1, len(value)):
        k = fail[i - 1]
        while k and value[i] != value[k]:
            k = fail[k - 1]
        fail[i] = k + (value[i] == value[k])
    matched = 0
    for byte in data[max(0, len(data) - len(value)) :]:
        if matched == len(value):
            matched = fail[matched - 1]
        while matched and byte != value[matched]:
            matched = fail[matched - 1]
        matched += byte == value[matched]
    return matched


def _held_back(data: bytes, values: Sequence[bytes]) -> int:
    """Where the longest tail of `data` that begins some value starts; len(data) when none does."""
    return len(data) - max(_longest_tail_beginning(data, value) for value in values)


def masked_read(
    read: Callable[[int, int], bytes],
    offset: int,
    length: int,
    secrets: Sequence[str],
    boundary: Callable[[bytes], int],
    live: bool,
) -> tuple[bytes, int, bool]:
    """Up to `length` bytes of a log from `offset` (read(offset, size) reads the file) with the secrets
    masked. Returns the bytes to show, how many bytes of the file they stand for, and whether more follows.
    `boundary` gives where a range's last whole character ends, for a range cut short of the log's end or
    of a log that may grow (`live`: the job still runs)."""
    values = _values(secrets)
    reach = max((len(v) for v in values), default=1) - 1
    back = min(offset, reach)
    # One byte past the range tells whether more follows.
    window = read(offset - back, back + length + 1 + reach)
    data = window[back : back + length]
    if len(window) > back + length or live:
        # A writer may be mid-character; leave the partial bytes for the next read unless that stalls.
        data = data[: boundary(data) or len(data)]
    end = back + len(data)
    spans = _covered(window, values)
    # An occurrence that runs past the range is shown whole, masked, in this read.
    end = max([end, *(stop for start, stop in spans if start < end < stop)])
    if live and values and end == len(window):
        covered_to = max([back, *(stop for _, stop in spans if stop <= end)])
        end = covered_to + _held_back(window[covered_to:end], values)
    return _masked(window, spans, back, end), end - back, len(window) > end

"""A module's top-level names read off its source, which is untrusted text: whatever it holds, the reader
answers with names or with why it does not parse (and where), and never runs it or raises."""

from __future__ import annotations

import pytest

from jobspec.module_names import Defined, Unparsable, defined_names


def test_names_bound_at_the_top_level_and_in_its_blocks() -> None:
    source = b"import a.b as c, d.e\nfor i, j in []:\n    k = 1\nwhile False:\n    pass\nelse:\n    w = 2\n"
    assert defined_names(source, "m.py") == Defined(frozenset({"c", "d", "i", "j", "k", "w"}), complete=True)


def test_running_the_source_is_never_needed() -> None:
    parsed = defined_names(b"raise SystemExit(1)\ndef build(): ...\n", "m.py")
    assert parsed == Defined(frozenset({"build"}), complete=True)


@pytest.mark.parametrize(
    ("source", "line"),
    [
        (b"def build(:\n", 1),
        (b"x = 1\n\xff\xfe = 2\n", None),  # not UTF-8, and no coding line says otherwise
        (b"x = 1\x00\n", None),
        (b"x = " + b"-" * 200_000 + b"1\n", None),  # deeper than the parser's stack
        (b"x = a" + b".b" * 200_000 + b"\n", None),
    ],
    ids=["syntax", "encoding", "null-byte", "deep-unary", "deep-attribute"],
)
def test_source_that_does_not_parse_says_why_and_where(source: bytes, line: int | None) -> None:
    parsed = defined_names(source, "m.py")
    assert isinstance(parsed, Unparsable)
    assert parsed.reason
    if line is not None:
        assert parsed.line == line

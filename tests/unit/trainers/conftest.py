"""Code bundles written to tmp_path, as a worker unpacks them, and imported without leaking: the modules a
test's bundle adds to sys.modules (models, data, ...) and its sys.path entry are gone after the test, so the
next test's bundle of the same module names is imported afresh."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainers.user_code import Bundle

WriteBundle = Callable[[dict[str, str]], Bundle]


@pytest.fixture
def write_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteBundle]:
    """Files (path relative to the bundle -> source, dedented) written and opened as a Bundle."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    root = tmp_path / "bundle"

    def write(files: dict[str, str]) -> Bundle:
        for name, source in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source).lstrip())
        return Bundle(root)

    yield write
    for name in set(sys.modules) - before:
        del sys.modules[name]

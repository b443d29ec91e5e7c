"""Server folders in messages and plans are written as their variables, whole path components only."""

from __future__ import annotations

import json
from pathlib import Path

from jobspec.shown_paths import Placeholders, with_placeholders

ROOTS = {"TRAINYARD_RUNS_DIR": Path("/srv/ty/runs"), "TRAINYARD_CODE_DIR": Path("/srv/ty/runs/code")}


def test_folders_become_their_variables() -> None:
    assert with_placeholders("--run-dir /srv/ty/runs/7", ROOTS) == "--run-dir $TRAINYARD_RUNS_DIR/7"
    assert with_placeholders("/srv/ty/runs", ROOTS) == "$TRAINYARD_RUNS_DIR"
    assert with_placeholders("--bind=/srv/ty/runs/7:/job", ROOTS) == "--bind=$TRAINYARD_RUNS_DIR/7:/job"
    # A folder inside another is named by its own variable.
    assert with_placeholders("/srv/ty/runs/code/ab", ROOTS) == "$TRAINYARD_CODE_DIR/ab"


def test_other_paths_are_left_alone() -> None:
    for text in ("/srv/ty/runs2/7", "/srv/ty/runs.old", "/srv/ty", "runs/7"):
        assert with_placeholders(text, ROOTS) == text


def test_a_json_document_is_written_as_its_strings_would_be() -> None:
    """Placeholders.in_json, as the API shows stored plans: every string of the document as
    with_placeholders writes it, with roots JSON must escape (a quote, a non-ASCII letter) in either form."""
    roots = {**ROOTS, "TRAINYARD_DATA_DIR": Path('/srv/ty/dätä "x"')}
    strings = [
        "--run-dir /srv/ty/runs/7",
        "/srv/ty/runs/code/ab",
        "/srv/ty/runs2/7",
        '/srv/ty/dätä "x"/images',
        "/srv/ty/runs.old",
    ]
    document = {"argv": strings, "nested": {"resume_path": strings[0], "n": 3}, "none": None}
    shown = [with_placeholders(text, roots) for text in strings]
    expected = {"argv": shown, "nested": {"resume_path": shown[0], "n": 3}, "none": None}
    for ascii_only in (True, False):
        text = json.dumps(document, ensure_ascii=ascii_only)
        assert json.loads(Placeholders(roots).in_json(text)) == expected

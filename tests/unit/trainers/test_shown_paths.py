"""Server folders in messages and plans are written as their variables, whole path components only."""

from __future__ import annotations

from pathlib import Path

from jobspec.shown_paths import with_placeholders

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

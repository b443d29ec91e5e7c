"""A job's mark names the standby that took an attempt on, from a file in the job's run directory, which a
sandboxed job's ranks may write too."""

from __future__ import annotations

import os
from pathlib import Path

from jobspec.startup import STANDBY_ID_ENV
from worker.executors.local.kill import mark_for, name_standby


def test_the_mark_matches_the_standbys_named_for_its_attempt(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    mark, next_attempt = mark_for(1, 1, "host-a", tmp_path), mark_for(1, 2, "host-a", tmp_path)
    name_standby(mark, "a1")
    name_standby(mark, "b2")  # another node of the attempt, on a shared disk
    ids = mark.standby_ids()
    assert ids == {"a1", "b2"} and next_attempt.standby_ids() == set()
    assert mark.matches({STANDBY_ID_ENV: "b2"}, ids) and not mark.matches({STANDBY_ID_ENV: "c3"}, ids)


def test_a_link_or_a_pipe_in_place_of_the_file_names_no_standby(tmp_path: Path) -> None:
    """A link could name another job's standby, and a pipe would hold the kill forever."""
    (tmp_path / "1").mkdir()
    mark, other = mark_for(1, 1, "host-a", tmp_path), mark_for(2, 1, "host-a", tmp_path)
    (tmp_path / "2").mkdir()
    name_standby(other, "theirs")
    mark.standby_file.symlink_to(other.standby_file)
    assert mark.standby_ids() == set()
    mark.standby_file.unlink()
    os.mkfifo(mark.standby_file)
    assert mark.standby_ids() == set()

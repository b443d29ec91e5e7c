"""A listing of a folder a job fills (logs/, stacks/, tensorboard/) is bounded, whatever the job made there:
at most `most` names looked at, LISTING_MAX_DEPTH folders deep, links neither listed nor followed, and no
descriptor left open when it stops early."""

from __future__ import annotations

import os
from pathlib import Path

from jobspec.files import LISTING_MAX_DEPTH, job_files


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_folder_of_many_names_is_listed_in_part(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    for index in range(300):
        (tmp_path / "logs" / f"rank{index}.log").touch()
    before = open_descriptors()
    assert len(job_files(tmp_path, "logs", most=50)) == 50
    assert len(job_files(tmp_path, "logs")) == 300
    assert job_files(tmp_path, "logs", most=0) == []  # a walk never started closes its folder too
    assert open_descriptors() == before


def test_only_the_folder_s_own_files_unless_deep(tmp_path: Path) -> None:
    nested = tmp_path / "stacks" / "a" / "b"
    nested.mkdir(parents=True)
    (tmp_path / "stacks" / "rank-0.pid").touch()
    (nested / "deeper.txt").touch()
    assert job_files(tmp_path, "stacks", deep=False) == ["stacks/rank-0.pid"]
    assert job_files(tmp_path, "stacks") == ["stacks/a/b/deeper.txt", "stacks/rank-0.pid"]


def test_a_folder_nested_past_the_depth_is_not_descended(tmp_path: Path) -> None:
    folder = tmp_path / "tensorboard"
    for depth in range(LISTING_MAX_DEPTH + 5):
        folder = folder / "d"
        (folder).mkdir(parents=True)
        (folder / f"at-{depth}").touch()
    listed = job_files(tmp_path, "tensorboard")
    assert len(listed) == LISTING_MAX_DEPTH
    assert listed[-1].endswith(f"at-{LISTING_MAX_DEPTH - 1}")


def test_planted_links_are_neither_listed_nor_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("the worker may read this")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank0.log").touch()
    (tmp_path / "logs" / "folder-link").symlink_to(outside)
    (tmp_path / "logs" / "file-link.log").symlink_to(outside / "secret")
    os.mkfifo(tmp_path / "logs" / "fifo.log")
    assert job_files(tmp_path, "logs") == ["logs/rank0.log"]
    assert job_files(tmp_path, "logs", deep=False) == ["logs/rank0.log"]

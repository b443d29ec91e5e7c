"""`trainyard code` and `submit --code`: a folder packed the same way every time, .trainyardignore honoured,
links refused, and the bundle commands against the real app in-process."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

from app.cli.pack import PackError, bundle_files, pack
from core.models import CodeBundle
from tests.unit.conftest import job_body

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]

TREE = {
    "models/__init__.py": "",
    "models/net.py": "WIDTH = 8\n",
    "data.py": "ROOT = 'set'\n",
    "weights/best.pt": "big",
    "runs/a.pt": "big",
    "runs/keep.pt": "small",
    "notes/scratch.txt": "x",
    "notes/plan.md": "y",
    ".git/config": "[core]",
    "__pycache__/data.cpython-311.pyc": "",
    "models/__pycache__/net.cpython-311.pyc": "",
    ".venv/bin/python": "",
    ".trainyardignore": "weights/\n*.pt\n!keep.pt\n/notes/*.txt\n",
}


def write_tree(root: Path, files: dict[str, str] = TREE) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def packed(root: Path) -> bytes:
    out = io.BytesIO()
    pack(root, out)
    return out.getvalue()


def test_the_ignore_file_and_the_always_skipped_folders_leave_paths_out(tmp_path: Path) -> None:
    files = [str(path) for path in bundle_files(write_tree(tmp_path))]
    assert files == [
        ".trainyardignore",
        "data.py",
        "models/__init__.py",
        "models/net.py",
        "notes/plan.md",
        "runs/keep.pt",
    ]


def test_the_same_tree_packs_to_the_same_bytes(tmp_path: Path) -> None:
    first_tree, second_tree = write_tree(tmp_path / "one"), write_tree(tmp_path / "two")
    os.utime(second_tree / "data.py", (1_000_000, 1_000_000))
    (second_tree / "data.py").chmod(0o600)  # no exec bit either way: packed as 0o644
    assert packed(first_tree) == packed(second_tree)
    assert packed(first_tree)[3:8] == bytes(5)  # gzip's header: no file name (flags 0), mtime 0
    with tarfile.open(fileobj=io.BytesIO(packed(first_tree))) as tar:
        members = tar.getmembers()
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert [m.name for m in members] == [str(path) for path in bundle_files(first_tree)]
    (second_tree / "data.py").write_text("ROOT = 'other'\n")
    assert packed(first_tree) != packed(second_tree)


def test_links_are_refused_unless_ignored(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "code", {"main.py": ""})
    (root / "secrets").symlink_to(Path.home())
    with pytest.raises(PackError, match="secrets is a symbolic link"):
        packed(root)
    (root / ".trainyardignore").write_text("secrets\n")
    assert [str(path) for path in bundle_files(root)] == [".trainyardignore", "main.py"]


def test_push_ls_show_submit_rm(run: CliRunnerCall, tmp_path: Path) -> None:
    folder = write_tree(tmp_path / "project")
    pushed = run("code", "push", folder)
    assert pushed.exit_code == 0, pushed.output
    bundle_id = f"sha256:{hashlib.sha256(packed(folder)).hexdigest()}"
    assert pushed.stdout.strip() == bundle_id  # the id alone on stdout, for scripts
    assert "pushed: 6 files" in pushed.stderr
    again = run("code", "push", folder)
    assert again.stdout.strip() == bundle_id and "already pushed" in again.stderr
    assert bundle_id in run("code", "ls").output
    shown = run("code", "show", bundle_id).output
    assert "6 files" in shown and "models/net.py" in shown and "jobs: -" in shown
    (tmp_path / "spec.json").write_text(json.dumps(job_body()))
    submitted = run("submit", tmp_path / "spec.json", "--code", folder)
    assert submitted.exit_code == 0, submitted.output
    assert f"code:     {bundle_id}" in run("status", 1).output
    busy = run("code", "rm", bundle_id)
    assert (
        busy.exit_code == 1
        and "used by job 1 (queued)" in busy.output
        and "(HTTP 409 at http://testserver, from TRAINYARD_URL)" in busy.output
    )
    run("cancel", 1)
    assert run("code", "rm", bundle_id).output.strip() == f"deleted {bundle_id}"
    assert run("code", "ls").output.startswith("no code bundles")


def test_an_empty_folder_is_refused_before_anything_is_sent(run: CliRunnerCall, tmp_path: Path) -> None:
    refused = run("code", "push", write_tree(tmp_path / "empty", {".git/HEAD": ""}))
    assert refused.exit_code == 1 and "has no files to push" in refused.output
    assert run("code", "ls").output.startswith("no code bundles")


def test_a_bundle_is_named_by_a_unique_prefix(run: CliRunnerCall, tmp_path: Path, session: Session) -> None:
    bundle_id = run("code", "push", write_tree(tmp_path / "project")).stdout.strip()
    digits = bundle_id.removeprefix("sha256:")
    # Another bundle whose id shares the first four digits and no more: a row as a push would leave it.
    other = f"sha256:{digits[:4]}{'1' if digits[4] == '0' else '0'}{digits[5:]}"
    session.add(CodeBundle(id=other, owner="local", size_bytes=1, unpacked_bytes=1, file_count=0, files=[]))
    session.commit()
    for prefix in (f"sha256:{digits[:5]}", digits[:5]):
        assert run("code", "show", prefix).output.startswith(f"{bundle_id}: local")
    ambiguous = run("code", "show", f"sha256:{digits[:4]}")
    assert ambiguous.exit_code == 1
    assert f"sha256:{digits[:4]} is ambiguous: it starts 2 bundles" in ambiguous.output
    assert bundle_id in ambiguous.output and other in ambiguous.output
    unknown_digits = "".join("0" if d != "0" else "1" for d in digits[:6])
    unknown = run("code", "show", unknown_digits)
    assert unknown.exit_code == 1
    assert f"no code bundle of yours starts with sha256:{unknown_digits}" in unknown.output
    assert "`trainyard code ls`" in unknown.output
    short = run("code", "show", digits[:3])
    assert short.exit_code == 1 and "at least 4 of its lowercase hex digits" in short.output
    (tmp_path / "spec.json").write_text(json.dumps(job_body(code=digits[:8])))
    submitted = run("submit", tmp_path / "spec.json")
    assert submitted.exit_code == 0, submitted.output
    assert f"code:     {bundle_id}" in run("status", 1).output
    run("cancel", 1)
    assert run("code", "rm", digits[:8]).output.strip() == f"deleted {bundle_id}"

"""app/cpu_pin.py's claims, in this process without pinning it: one API process per CPU, a CPU claimed
again once its process has gone, none for a process that finds every one taken. (test_serve.py pins real
API processes.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app import cpu_pin


def test_each_cpu_is_claimed_once_and_again_once_its_claim_is_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_pin, "CLAIMS_DIR", tmp_path)
    first = cpu_pin._claim_one([3, 2])
    second = cpu_pin._claim_one([3, 2])
    assert first is not None and second is not None
    assert (first[0], second[0]) == (3, 2), "the highest first, then the next free one"
    assert cpu_pin._claim_one([3, 2]) is None, "every CPU taken: none"
    os.close(first[1])  # as when its process goes, however it goes
    again = cpu_pin._claim_one([3, 2])
    assert again is not None and again[0] == 3
    for _, descriptor in (second, again):
        os.close(descriptor)


def test_a_process_not_pinned_gives_its_children_the_cpus_it_may_use() -> None:
    assert cpu_pin.process_cpus() == frozenset(os.sched_getaffinity(0))


def test_a_link_planted_among_the_claims_is_refused_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claims sit under the shared temporary folder, where a job run unsandboxed as the API's user could
    plant a link in the place of a claim: the claim fails (and the process stays unpinned), and the file the
    link names is neither made nor opened."""
    claims = tmp_path / "claims"
    claims.mkdir(mode=0o700)
    monkeypatch.setattr(cpu_pin, "CLAIMS_DIR", claims)
    target = tmp_path / "elsewhere"
    (claims / "3.lock").symlink_to(target)
    with pytest.raises(OSError):
        cpu_pin._claim_one([3])
    assert not target.exists()


def test_a_claims_folder_others_may_write_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    claims = tmp_path / "claims"
    claims.mkdir()
    claims.chmod(0o777)
    monkeypatch.setattr(cpu_pin, "CLAIMS_DIR", claims)
    with pytest.raises(PermissionError):
        cpu_pin._private_claims_dir()
    claims.chmod(0o700)
    cpu_pin._private_claims_dir()  # this user's alone: taken
    monkeypatch.setattr(cpu_pin, "CLAIMS_DIR", tmp_path / "link")
    (tmp_path / "link").symlink_to(claims)
    with pytest.raises(PermissionError):  # a link in the folder's place is not a folder
        cpu_pin._private_claims_dir()

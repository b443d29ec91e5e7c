"""Checkpoint writes under SIGKILL at arbitrary moments, in a real writer process; loads that refuse pickled
code."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.integration.servers import ROOT
from trainers.checkpoint import load_checkpoint, remove_temp_files, write_atomically

# Writes step-N.pt one after another, each big enough (8 MB) that a kill often lands mid-write.
WRITER = """
import sys, torch
from pathlib import Path
from trainers.checkpoint import write_atomically
directory = Path(sys.argv[1])
for step in range(1, 10_000):
    write_atomically({"step": step, "w": torch.full((2 << 20,), float(step))}, directory / "latest.pt")
    print(step, flush=True)
"""


@pytest.mark.parametrize("delay_s", [0.0, 0.04, 0.17])
def test_a_writer_killed_at_any_moment_leaves_a_loadable_checkpoint(tmp_path: Path, delay_s: float) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    first = int(writer.stdout.readline())  # one complete checkpoint exists from here on
    time.sleep(delay_s)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    state = load_checkpoint(tmp_path / "latest.pt", torch.device("cpu"))
    assert state["step"] >= first
    assert torch.equal(state["w"], torch.full((2 << 20,), float(state["step"])))
    remove_temp_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pt"]


class RunsCode:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned",))


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    evil = tmp_path / "evil.pt"
    torch.save({"model": RunsCode()}, evil)
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(evil, torch.device("cpu"))
    assert not (tmp_path / "pwned").exists()


def test_write_atomically_replaces_only_whole_files(tmp_path: Path) -> None:
    write_atomically({"step": 1}, tmp_path / "c.pt")
    write_atomically({"step": 2}, tmp_path / "c.pt")
    assert load_checkpoint(tmp_path / "c.pt", torch.device("cpu"))["step"] == 2

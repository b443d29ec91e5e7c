"""bench.streaming end to end at toy size on the CPU (--smoke): it writes its folder, runs the trainer
streamed and resident and the hand-written loop, and prints one table row each. Nothing is timed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.streaming import FOLDER
from tests.integration.trainer_helpers import ROOT


def test_the_smoke_run_writes_the_folder_and_fills_every_row(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench.streaming", "--smoke", "--dir", str(tmp_path), "--workers", "1"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert len(list((tmp_path / FOLDER).rglob("*.jpg"))) == 64
    rows = {
        line.split(" | ")[0].lstrip("| "): line for line in done.stdout.splitlines() if line.startswith("| ")
    }
    for variant in (
        "streamed (loader workers)",
        "decoded once, resident",
        "hand-written ImageFolder loop (1 workers)",
    ):
        assert variant in rows and "—" not in rows[variant].split(" | ")[1], rows
    assert "streamed (data.decode=gpu) (skipped: needs a GPU)" in rows
    assert "streamed: hand-written img/s" in rows and "streamed: resident img/s" in rows
